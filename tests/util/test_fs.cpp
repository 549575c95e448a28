// Atomic outputs, directory locks, input reading errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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

TEST(AtomicOutput, StaleTemporariesOfDeadProcessesAreRemovedOnTheNextWrite) {
  test::TempDir dir;
  const std::string target = dir.file("ck.h5");
  // A writer killed before it could remove its temporary (_exit skips every destructor).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    fs::AtomicOutput output(target);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  auto temporaries = [&] {
    std::vector<std::string> names;
    for (const auto& name : dir.entries()) {
      if (name.find(".tmp-") != std::string::npos) names.push_back(name);
    }
    return names;
  };
  ASSERT_EQ(temporaries().size(), 1u);
  EXPECT_NE(temporaries()[0].find("-" + std::to_string(child) + "-"), std::string::npos);
  // One of a live process (pid 1), one of another host on a shared disk, one of older mbkit.
  std::array<char, 256> host{};
  ASSERT_EQ(::gethostname(host.data(), host.size() - 1), 0);
  const std::string live = ".ck.h5.tmp-" + std::string(host.data()) + "-1-abcdef";
  test::write_text(dir.file(live), "x");
  test::write_text(dir.file(".ck.h5.tmp-elsewhere.example-99999999-abcdef"), "x");
  test::write_text(dir.file(".ck.h5.tmp-ABCDEF"), "x");
  {
    fs::AtomicOutput output(target);
    test::write_text(output.temp_path(), "new");
    output.commit();
  }
  std::vector<std::string> kept = {".ck.h5.tmp-ABCDEF",
                                   ".ck.h5.tmp-elsewhere.example-99999999-abcdef", live};
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(temporaries(), kept);
}

TEST(AtomicOutput, AnyWriteRemovesStaleTemporariesOfOtherNamesBesideIt) {
  test::TempDir dir;
  // A writer of big.h5 killed (kill -9) before it could remove its temporary.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    fs::AtomicOutput output(dir.file("big.h5"));
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_EQ(dir.entries().size(), 1u);
  // Its name carries the pid, so the next writer can tell it from a live writer's.
  EXPECT_NE(dir.entries()[0].find("-" + std::to_string(child) + "-"), std::string::npos);
  // A file of the user's that merely looks like one is not ours.
  test::write_text(dir.file("notes.tmp-x"), "mine");
  {
    fs::AtomicOutput output(dir.file("small.h5"));
    test::write_text(output.temp_path(), "new");
    output.commit();
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"notes.tmp-x", "small.h5"}));
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
  test::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const std::string locked = dir.file("locked");
  ASSERT_EQ(::mkdir(locked.c_str(), 0555), 0);
  // Root writes into read-only directories, so the check runs in a child that has dropped to
  // the unprivileged "nobody" when the test runs as root (as in CI containers).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    try {
      fs::AtomicOutput output(locked + "/out.h5");
      ::_exit(1);  // created a file in a read-only directory
    } catch (const Error& error) {
      ::_exit(std::string(error.what()).find("Permission denied") != std::string::npos ? 0 : 2);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error, 2: wrong message, 3: could not drop root";
  ASSERT_EQ(::chmod(locked.c_str(), 0755), 0);
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
