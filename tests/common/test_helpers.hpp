// Helpers shared by the unit tests: temporary directories, small generated inputs, and an
// assertion that an expression throws mbkit::Error with a given exit code and message text.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/nn/graph.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::test {

/// The process's World, for tests run under mpirun (OnRanks.*): one for all the tests of the
/// process, because MPI starts once and ends at exit.
const comm::World& world_of_ranks();

/// The input and class count a zoo model is made for (resnet50, vgg16: ImageNet; the CIFAR
/// models (alexnet: its CIFAR-10 variant);
/// the toy models; the MNIST-shaped rest).
struct UsualInput {
  nn::Dims input;
  int classes;
};
UsualInput usual_input(const std::string& model);

/// A fresh directory under $TMPDIR, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  /// Names of the entries in the directory (hidden ones included), sorted.
  std::vector<std::string> entries() const;

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes);
void write_text(const std::string& path, const std::string& text);
std::vector<std::uint8_t> bytes_of(const std::string& text);
/// The files this process has mapped (/proc/self/maps): which libraries are loaded.
std::string mapped_files();

/// gzip-compresses with zlib (a real gzip stream, as gzip(1) writes).
std::vector<std::uint8_t> gzip(const std::vector<std::uint8_t>& bytes);
/// An IDX file of unsigned bytes with the given dimensions (big-endian header).
std::vector<std::uint8_t> make_idx(const std::vector<std::uint32_t>& dims,
                                   const std::vector<std::uint8_t>& data);
/// A tar.gz holding the given members (path inside the archive, content), via libarchive.
void write_tar_gz(const std::string& path,
                  const std::vector<std::pair<std::string, std::vector<std::uint8_t>>>& members);

/// max |a - b| / max(1, max |reference|): the error relative to the tensor's scale, as ggml's
/// NMSE is (backend parity of ops and of whole models).
double normalised_error(const std::vector<float>& actual, const std::vector<float>& reference);

/// The exit code of the mbkit::Error `body` throws (kSuccess when it throws none): for loops
/// over bad inputs that only check the code.
ExitCode code_of(const std::function<void()>& body);

/// Runs `statement`, which must throw mbkit::Error with `code` and a message containing `text`.
#define EXPECT_MBKIT_ERROR(statement, expected_code, text)                        \
  do {                                                                            \
    try {                                                                         \
      statement;                                                                  \
      ADD_FAILURE() << "expected mbkit::Error containing '" << (text) << "'";     \
    } catch (const ::mbkit::Error& error_) {                                      \
      EXPECT_EQ(static_cast<int>(error_.code()), static_cast<int>(expected_code)) \
          << error_.what();                                                       \
      EXPECT_NE(std::string(error_.what()).find(text), std::string::npos)         \
          << "message: " << error_.what();                                        \
      EXPECT_EQ(std::string(error_.what()).find('\n'), std::string::npos)         \
          << "message is not one line: " << error_.what();                        \
    }                                                                             \
  } while (0)

}  // namespace mbkit::test
