# FindSentencePiece: Debian's libsentencepiece-dev ships a pkg-config file but no CMake config.
# Defines the imported target SentencePiece::SentencePiece.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_SENTENCEPIECE QUIET sentencepiece)
endif()
find_path(SentencePiece_INCLUDE_DIR sentencepiece_processor.h HINTS ${PC_SENTENCEPIECE_INCLUDE_DIRS})
find_library(SentencePiece_LIBRARY NAMES sentencepiece HINTS ${PC_SENTENCEPIECE_LIBRARY_DIRS})
find_library(SentencePiece_TRAIN_LIBRARY NAMES sentencepiece_train HINTS ${PC_SENTENCEPIECE_LIBRARY_DIRS})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SentencePiece
  REQUIRED_VARS SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY SentencePiece_INCLUDE_DIR
  VERSION_VAR PC_SENTENCEPIECE_VERSION)
if(SentencePiece_FOUND AND NOT TARGET SentencePiece::SentencePiece)
  add_library(SentencePiece::SentencePiece UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::SentencePiece PROPERTIES
    IMPORTED_LOCATION "${SentencePiece_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${SentencePiece_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${SentencePiece_TRAIN_LIBRARY}")
endif()
mark_as_advanced(SentencePiece_INCLUDE_DIR SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY)
