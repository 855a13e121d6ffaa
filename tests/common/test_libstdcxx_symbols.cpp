// PyPI libtorch exports copies of libstdc++'s std::filesystem functions (pytorch/pytorch#133437).
// With torch 2.11.0+cu130, remove_all called from our binaries bound to libtorch.so's copy and
// crashed; for libtorch before 2.14 CMakeLists.txt lists libstdc++.so.6 first, so ours win.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

// The shared object that holds the definition a function pointer resolved to.
std::string library_of(void* fn) {
  Dl_info info{};
  return dladdr(fn, &info) != 0 && info.dli_fname ? info.dli_fname : "";
}

TEST(LibstdcxxSymbols, FilesystemFunctionsComeFromLibstdcxxBeforeTorch214) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 14)
  GTEST_SKIP() << "libtorch " << TORCH_VERSION << ": its copies work, the link order is left as it is";
#endif
  using RemoveAll = std::uintmax_t (*)(const fs::path&);
  using CreateDirectories = bool (*)(const fs::path&);
  const RemoveAll remove_all = &fs::remove_all;
  const CreateDirectories create_directories = &fs::create_directories;
  for (void* fn : {reinterpret_cast<void*>(remove_all), reinterpret_cast<void*>(create_directories)}) {
    const std::string lib = library_of(fn);
    EXPECT_NE(lib.find("libstdc++"), std::string::npos) << "resolved to '" << lib << "'";
  }
}

TEST(LibstdcxxSymbols, RemoveAllRemovesATree) {
  const fs::path root = fs::temp_directory_path() / ("unstuck_fs_" + std::to_string(::getpid()));
  fs::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "f.txt") << "x";
  std::ofstream(root / "g.txt") << "y";
  EXPECT_EQ(fs::remove_all(root), 5u);  // root, a, b and two files
  EXPECT_FALSE(fs::exists(root));
}

}  // namespace
