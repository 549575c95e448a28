#include "mbkit/data/parsers.hpp"

#include "mbkit/util/check.hpp"

namespace mbkit::data {
namespace {

// The largest channel count, height or width an image may have (int-sized, and far above any
// published dataset's).
constexpr std::uint32_t kMaxImageExtent = 1u << 16;

std::uint32_t read_be32(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
         (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

}  // namespace

IdxHeader parse_idx_header(std::span<const std::uint8_t> bytes, const std::string& name,
                           IdxRole role) {
  if (bytes.empty()) data_error(cat(name, ": the file is empty, not an IDX file"));
  if (bytes.size() < 4)
    data_error(cat(name, ": too short for an IDX file (", bytes.size(), " bytes)"));
  const char* expected = role == IdxRole::kImages   ? "0x00000803 or 0x00000804, an image file"
                         : role == IdxRole::kLabels ? "0x00000801, a label file"
                                                    : "0x000008nn";
  const std::string found = strprintf("0x%02x%02x%02x%02x", bytes[0], bytes[1], bytes[2], bytes[3]);
  if (bytes[0] != 0 || bytes[1] != 0)
    data_error(cat(name, ": wrong IDX magic number ", found, " (expected ", expected, ")"));
  if (bytes[2] != 0x08) {
    data_error(cat(name, ": IDX element type 0x", strprintf("%02x", bytes[2]),
                   " is not supported (only unsigned bytes, 0x08)"));
  }
  const int rank = bytes[3];
  const bool rank_fits = role == IdxRole::kImages   ? rank == 3 || rank == 4
                         : role == IdxRole::kLabels ? rank == 1
                                                    : rank >= 1 && rank <= 4;
  if (!rank_fits) {
    if (rank < 1 || rank > 4) data_error(cat(name, ": IDX file with ", rank, " dimensions"));
    data_error(cat(name, ": wrong IDX magic number ", found, " (", rank,
                   rank == 1 ? " dimension" : " dimensions", "; expected ", expected, ")"));
  }
  IdxHeader header;
  header.header_bytes = 4 + 4 * static_cast<std::size_t>(rank);
  if (bytes.size() < header.header_bytes) data_error(cat(name, ": truncated IDX header"));
  std::uint64_t elements = 1;
  for (int d = 0; d < rank; ++d) {
    const std::uint32_t extent = read_be32(bytes.data() + 4 + 4 * d);
    header.dims.push_back(extent);
    // Checked before multiplying: 2^40 * 2^32 would wrap around 64 bits to a small count.
    if (extent != 0 && elements > (std::uint64_t{1} << 40) / extent)
      data_error(cat(name, ": IDX dimensions are absurd"));
    elements *= extent;
  }
  header.data_bytes = elements;
  return header;
}

std::string describe_idx(const IdxHeader& header, IdxRole role) {
  if (header.dims.empty()) return "nothing";
  std::string extents;
  for (std::size_t d = 1; d < header.dims.size(); ++d)
    extents += cat(d > 1 ? "x" : "", header.dims[d]);
  const bool one = header.dims[0] == 1;
  if (role == IdxRole::kLabels) return cat(header.dims[0], one ? " label" : " labels");
  if (role == IdxRole::kImages)
    return cat(header.dims[0], one ? " image of " : " images of ", extents);
  return cat(header.dims[0], one ? " entry" : " entries", extents.empty() ? "" : " of ", extents);
}

IdxArray parse_idx(std::vector<std::uint8_t> bytes, const std::string& name, IdxRole role) {
  const IdxHeader header = parse_idx_header(bytes, name, role);
  const std::uint64_t available = bytes.size() - header.header_bytes;
  if (available < header.data_bytes) {
    data_error(cat(name, ": truncated: the header announces ", header.data_bytes,
                   " bytes of data but ", available, " are present"));
  }
  if (available > header.data_bytes) {
    data_error(
        cat(name, ": ", available - header.data_bytes, " unexpected bytes after the IDX data"));
  }
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header.header_bytes));
  return {header.dims, std::move(bytes)};
}

void check_idx_pair(const std::vector<std::uint32_t>& image_dims, const std::string& images_name,
                    const std::vector<std::uint32_t>& label_dims, const std::string& labels_name) {
  if (image_dims.size() != 3 && image_dims.size() != 4) {
    data_error(cat(images_name, ": an image file needs 3 or 4 dimensions, this one has ",
                   image_dims.size()));
  }
  if (label_dims.size() != 1) {
    data_error(
        cat(labels_name, ": a label file needs 1 dimension, this one has ", label_dims.size()));
  }
  if (image_dims[0] != label_dims[0]) {
    data_error(cat(images_name, " has ", image_dims[0], " images but ", labels_name, " has ",
                   label_dims[0], " labels"));
  }
  for (std::size_t d = 1; d < image_dims.size(); ++d) {
    if (image_dims[d] == 0 || image_dims[d] > kMaxImageExtent) {
      data_error(cat(images_name, ": image dimension ", d, " is ", image_dims[d],
                     " (expected 1 to ", kMaxImageExtent, ")"));
    }
  }
}

LabeledImages combine_idx(IdxArray images, const std::string& images_name, IdxArray labels,
                          const std::string& labels_name, int num_classes) {
  check_idx_pair(images.dims, images_name, labels.dims, labels_name);
  LabeledImages split;
  if (images.dims.size() == 3) {
    split.shape = {1, static_cast<int>(images.dims[1]), static_cast<int>(images.dims[2])};
  } else {
    split.shape = {static_cast<int>(images.dims[1]), static_cast<int>(images.dims[2]),
                   static_cast<int>(images.dims[3])};
  }
  split.labels.resize(labels.data.size());
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    const int label = labels.data[i];
    if (label >= num_classes) {
      data_error(cat(labels_name, ": label ", label, " at index ", i, " is outside [0, ",
                     num_classes, ")"));
    }
    split.labels[i] = label;
  }
  split.images = std::move(images.data);
  return split;
}

LabeledImages parse_cifar(std::span<const std::uint8_t> bytes, int label_bytes, int num_classes,
                          int num_coarse_classes, const std::string& name) {
  MBKIT_CHECK(label_bytes == 1 || label_bytes == 2, "CIFAR records have 1 or 2 label bytes");
  LabeledImages split;
  split.shape = {3, 32, 32};
  const std::size_t pixels = split.shape.pixels();
  const std::size_t record = pixels + static_cast<std::size_t>(label_bytes);
  if (bytes.empty() || bytes.size() % record != 0) {
    data_error(cat(name, ": ", bytes.size(), " bytes is not a whole number of ", record,
                   "-byte CIFAR records (truncated or not a CIFAR batch)"));
  }
  const std::size_t count = bytes.size() / record;
  split.images.resize(count * pixels);
  split.labels.resize(count);
  if (label_bytes == 2) split.coarse_labels.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint8_t* row = bytes.data() + i * record;
    const int label = row[label_bytes - 1];
    if (label >= num_classes) {
      data_error(
          cat(name, ": label ", label, " of record ", i, " is outside [0, ", num_classes, ")"));
    }
    split.labels[i] = label;
    if (label_bytes == 2) {
      if (row[0] >= num_coarse_classes) {
        data_error(cat(name, ": coarse label ", int{row[0]}, " of record ", i, " is outside [0, ",
                       num_coarse_classes, ")"));
      }
      split.coarse_labels[i] = row[0];
    }
    std::copy(row + label_bytes, row + record,
              split.images.begin() + static_cast<std::ptrdiff_t>(i * pixels));
  }
  return split;
}

std::vector<std::string> parse_class_name_lines(std::span<const std::uint8_t> bytes) {
  std::vector<std::string> names;
  for (const auto& line :
       split(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), '\n')) {
    const auto name = trim(line);
    if (!name.empty()) names.emplace_back(name);
  }
  return names;
}

void append_images(LabeledImages& a, LabeledImages&& b) {
  if (a.labels.empty() && a.images.empty()) {
    a = std::move(b);
    return;
  }
  MBKIT_CHECK(a.shape == b.shape, "cannot append ", b.shape.text(), " images to ", a.shape.text());
  a.images.insert(a.images.end(), b.images.begin(), b.images.end());
  a.labels.insert(a.labels.end(), b.labels.begin(), b.labels.end());
  a.coarse_labels.insert(a.coarse_labels.end(), b.coarse_labels.begin(), b.coarse_labels.end());
}

}  // namespace mbkit::data
