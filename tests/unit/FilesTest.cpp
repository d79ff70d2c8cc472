//===- FilesTest.cpp - Atomic outputs, full disks, non-regular inputs -----===//

#include "runtime/core/Files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace trainc::rt;

namespace {

std::string tempDir(const char *name) {
  std::string d = ::testing::TempDir() + "/trainc_files_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(FilesTest, AtomicWriteReplacesASymlinkInsteadOfFollowingIt) {
  std::string d = tempDir("symlink");
  std::ofstream(d + "/victim") << "precious";
  std::filesystem::create_symlink(d + "/victim", d + "/out");
  ASSERT_TRUE(writeFileAtomically(d + "/out", "new contents").ok());
  EXPECT_EQ(slurp(d + "/victim"), "precious");
  EXPECT_FALSE(std::filesystem::is_symlink(d + "/out"));
  EXPECT_EQ(slurp(d + "/out"), "new contents");
  // An incrementally written output refuses to open through a symlink.
  std::filesystem::create_symlink(d + "/victim", d + "/log");
  OutputFile f;
  absl::Status s = f.open(d + "/log");
  EXPECT_EQ(s.message(), "cannot create '" + d + "/log': Too many levels of symbolic links");
  EXPECT_EQ(slurp(d + "/victim"), "precious");
}

TEST(FilesTest, NonRegularInputsAreRefusedWithoutBlocking) {
  std::string d = tempDir("kinds");
  ASSERT_EQ(::mkfifo((d + "/fifo").c_str(), 0644), 0);
  EXPECT_EQ(checkRegularFile(d + "/fifo", "program").message(),
            "program file '" + d + "/fifo' is a FIFO, not a regular file");
  EXPECT_EQ(checkRegularFile(d, "data").message(),
            "data file '" + d + "' is a directory, not a regular file");
  EXPECT_EQ(checkRegularFile("/dev/zero", "data").message(),
            "data file '/dev/zero' is a device, not a regular file");
  EXPECT_EQ(checkRegularFile(d + "/missing", "program").message(),
            "cannot read program file '" + d + "/missing': No such file or directory");
  std::ofstream(d + "/ok") << "x";
  EXPECT_TRUE(checkRegularFile(d + "/ok", "program").ok());
}

// A full disk (a 64 KiB tmpfs): the failing write reports the path and errno at once, and an
// atomic write that does not fit leaves the old file intact and no temporary behind.
TEST(FilesTest, FullDiskIsReportedAtTheFailingWrite) {
  std::string d = tempDir("full");
  if (::mount("tmpfs", d.c_str(), "tmpfs", 0, "size=64k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (not root?)";
  struct Unmount {
    std::string d;
    ~Unmount() { ::umount(d.c_str()); }
  } unmount{d};
  ASSERT_TRUE(writeFileAtomically(d + "/plan.pb", "old").ok());
  absl::Status big = writeFileAtomically(d + "/plan.pb", std::string(1 << 20, 'x'));
  EXPECT_EQ(big.message(), "cannot write '" + d + "/plan.pb': No space left on device");
  EXPECT_EQ(slurp(d + "/plan.pb"), "old");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d),
                          std::filesystem::directory_iterator()),
            1);
  OutputFile f;
  ASSERT_TRUE(f.open(d + "/losses.txt").ok());
  std::string line(1000, 'l');
  absl::Status s;
  int writes = 0;
  while ((s = f.write(line)).ok() && writes < 1000)
    ++writes;
  EXPECT_LT(writes, 100); // 64 KiB, less what plan.pb holds
  EXPECT_EQ(s.message(), "cannot write '" + d + "/losses.txt': No space left on device");
}

} // namespace
