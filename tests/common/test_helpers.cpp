#include "test_helpers.hpp"

#include "mbkit/util/strings.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace mbkit::test {

UsualInput usual_input(const std::string& model) {
  if (model == "resnet50" || model == "vgg16") return {{3, 224, 224}, 1000};
  // The smallest input inception3 takes (its ImageNet size is 299x299): the tests that run
  // every model stay cheap.
  if (model == "inception3") return {{3, 75, 75}, 1000};
  if (model == "alexnet" || starts_with(model, "densenet")) return {{3, 32, 32}, 10};
  if (model == "resnet18") return {{3, 32, 32}, 100};
  if (starts_with(model, "resnet") || model == "cifar10-cnn") return {{3, 32, 32}, 10};
  if (starts_with(model, "toy")) return {{1, 10, 10}, 10};
  return {{1, 28, 28}, 10};
}

const comm::World& world_of_ranks() {
  static const comm::World world;
  return world;
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/mbkit-test-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::add, ec);
  std::filesystem::remove_all(path_, ec);
}

std::vector<std::string> TempDir::entries() const {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path_)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_text(const std::string& path, const std::string& text) {
  write_file(path, bytes_of(text));
}

std::vector<std::uint8_t> bytes_of(const std::string& text) {
  return std::vector<std::uint8_t>(text.begin(), text.end());
}

std::string mapped_files() {
  std::ifstream maps("/proc/self/maps");
  std::string text, line;
  while (std::getline(maps, line)) text += line + '\n';
  return text;
}

ExitCode code_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.code();
  }
  return ExitCode::kSuccess;
}

std::vector<std::uint8_t> gzip(const std::vector<std::uint8_t>& bytes) {
  z_stream stream{};
  if (deflateInit2(&stream, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  std::vector<std::uint8_t> out(deflateBound(&stream, bytes.size()) + 64);
  stream.next_in = const_cast<Bytef*>(bytes.data());
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  if (deflate(&stream, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate failed");
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::vector<std::uint8_t> make_idx(const std::vector<std::uint32_t>& dims,
                                   const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out = {0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (const auto extent : dims) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<std::uint8_t>(extent >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_tar_gz(const std::string& path,
                  const std::vector<std::pair<std::string, std::vector<std::uint8_t>>>& members) {
  archive* writer = archive_write_new();
  archive_write_add_filter_gzip(writer);
  archive_write_set_format_pax_restricted(writer);
  if (archive_write_open_filename(writer, path.c_str()) != ARCHIVE_OK) {
    throw std::runtime_error("cannot create " + path);
  }
  for (const auto& [name, content] : members) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, name.c_str());
    archive_entry_set_size(entry, static_cast<la_int64_t>(content.size()));
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_perm(entry, 0644);
    archive_write_header(writer, entry);
    archive_write_data(writer, content.data(), content.size());
    archive_entry_free(entry);
  }
  archive_write_close(writer);
  archive_write_free(writer);
}

double normalised_error(const std::vector<float>& actual, const std::vector<float>& reference) {
  double scale = 1.0, worst = 0.0;
  for (float value : reference) scale = std::max(scale, std::fabs(double{value}));
  for (std::size_t i = 0; i < reference.size(); ++i) {
    worst = std::max(worst, std::fabs(double{actual[i]} - reference[i]));
  }
  return worst / scale;
}

}  // namespace mbkit::test
