// Atomic outputs, directory locks, input reading errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "mbkit/util/fs.hpp"
#include "test_helpers.hpp"

namespace mbkit {
namespace {

TEST(AtomicOutput, FileAppearsOnlyOnCommit) {
  test::TempDir dir;
  const std::string target = dir.file("out.bin");
  {
    fs::AtomicOutput output(target);
    EXPECT_EQ(fs::parent_directory(output.temp_path()), dir.path());
    test::write_text(output.temp_path(), "payload");
    EXPECT_FALSE(fs::exists(target));
    output.commit();
  }
  EXPECT_EQ(fs::read_text_file(target), "payload");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicOutput, UncommittedTemporaryIsRemovedAndOldFileKept) {
  test::TempDir dir;
  const std::string target = dir.file("out.bin");
  test::write_text(target, "old");
  try {
    fs::AtomicOutput output(target);
    test::write_text(output.temp_path(), "half-written");
    throw std::runtime_error("failure while writing");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(fs::read_text_file(target), "old");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicOutput, CommitReplacesAnExistingFile) {
  test::TempDir dir;
  const std::string target = dir.file("out.bin");
  test::write_text(target, "old");
  fs::AtomicOutput output(target);
  test::write_text(output.temp_path(), "new");
  output.commit();
  EXPECT_EQ(fs::read_text_file(target), "new");
}

TEST(AtomicOutput, MissingDirectoryFailsBeforeAnyWork) {
  EXPECT_MBKIT_ERROR(fs::AtomicOutput("/nonexistent-dir/out.h5"), ExitCode::kFailure,
                     "directory /nonexistent-dir does not exist");
}

TEST(AtomicOutput, ParentThatIsAFileFails) {
  test::TempDir dir;
  test::write_text(dir.file("plain"), "x");
  EXPECT_MBKIT_ERROR(fs::AtomicOutput(dir.file("plain") + "/out.h5"), ExitCode::kFailure,
                     "is not a directory");
}

TEST(AtomicOutput, ReadOnlyDirectoryFails) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  test::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  EXPECT_MBKIT_ERROR(fs::AtomicOutput(dir.file("out.h5")), ExitCode::kFailure, "Permission denied");
}

TEST(ReadFile, MissingAndDirectoryInputsAreDataErrors) {
  test::TempDir dir;
  EXPECT_MBKIT_ERROR(fs::read_file(dir.file("absent")), ExitCode::kBadData, "No such file");
  EXPECT_MBKIT_ERROR(fs::read_file(dir.path()), ExitCode::kBadData, "is a directory");
}

TEST(DirectoryLock, SecondHolderWaitsForTheFirst) {
  test::TempDir dir;
  const std::string held = dir.file("held"), released = dir.file("released");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    {
      fs::DirectoryLock lock(dir.path());
      test::write_text(held, "1");
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      test::write_text(released, "1");
    }
    ::_exit(0);
  }
  while (!fs::exists(held)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  {
    fs::DirectoryLock lock(dir.path());
    EXPECT_TRUE(lock.locked());
    // We can only hold the lock once the child has let it go, after writing `released`.
    EXPECT_TRUE(fs::exists(released));
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace mbkit
