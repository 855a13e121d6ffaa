// Translation unit that builds the shared libtorch precompiled header (see src/CMakeLists.txt).
