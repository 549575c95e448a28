#include "mbkit/data/sources.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "mbkit/data/archive.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit::data {

namespace {

LoadedDataset load_idx_arrays(std::array<IdxArray, 4> arrays,
                              const std::array<NamedBytes, 4>& files, int num_classes) {
  if (num_classes <= 0) {
    int largest = 0;
    for (const std::size_t i : {1u, 3u}) {
      for (const std::uint8_t label : arrays[i].data) largest = std::max<int>(largest, label);
    }
    num_classes = largest + 1;
  }
  LoadedDataset dataset;
  dataset.num_classes = num_classes;
  dataset.train = combine_idx(std::move(arrays[0]), files[0].name, std::move(arrays[1]),
                              files[1].name, num_classes);
  dataset.test = combine_idx(std::move(arrays[2]), files[2].name, std::move(arrays[3]),
                             files[3].name, num_classes);
  if (dataset.train.shape != dataset.test.shape) {
    data_error(cat(files[0].name, " holds ", dataset.train.shape.text(), " images but ",
                   files[2].name, " holds ", dataset.test.shape.text()));
  }
  return dataset;
}

}  // namespace

LoadedDataset load_idx(std::array<NamedBytes, 4> files, int num_classes) {
  std::array<IdxArray, 4> arrays;
  for (std::size_t i = 0; i < 4; ++i) {
    arrays[i] = parse_idx(std::move(files[i].bytes), files[i].name,
                          i % 2 == 0 ? IdxRole::kImages : IdxRole::kLabels);
  }
  return load_idx_arrays(std::move(arrays), files, num_classes);
}

namespace {

// One of the four IDX files as found on disk, its header read (and checked) before its data.
struct IdxSource {
  std::string name;
  std::vector<std::uint8_t> raw;  // as stored: gzip or plain IDX
  IdxRole role = IdxRole::kAny;
  IdxHeader header;
};

IdxSource read_idx_header(const std::string& path, IdxRole role) {
  IdxSource source{fs::base_name(path), fs::read_file(path), role, {}};
  if (source.raw.empty()) data_error(cat(path, ": the file is empty, not an IDX file"));
  if (!is_gzip(source.raw)) {
    source.header = parse_idx_header(source.raw, source.name, role);
    return source;
  }
  source.header = parse_idx_header(gunzip_prefix(source.raw, kLongestIdxHeader, source.name),
                                   source.name, role);
  // Checked before inflating: a small file declaring a huge array would otherwise take the
  // memory and time of inflating it before being found truncated.
  if (source.header.file_bytes() > source.raw.size() * kMaxDeflateRatio) {
    data_error(cat(source.name, ": its IDX header declares ", describe_idx(source.header, role),
                   " (", source.header.file_bytes(), " bytes), more than its ", source.raw.size(),
                   " bytes of gzip data can hold (deflate expands at most ", kMaxDeflateRatio,
                   ":1)"));
  }
  return source;
}

IdxArray read_idx_data(IdxSource source) {
  if (!is_gzip(source.raw)) return parse_idx(std::move(source.raw), source.name, source.role);
  auto bytes = gunzip_exact(source.raw, source.header.file_bytes(), source.name,
                            cat("its IDX header and ", describe_idx(source.header, source.role)));
  source.raw = {};
  return parse_idx(std::move(bytes), source.name, source.role);
}

}  // namespace

LoadedDataset load_idx_files(const std::array<std::string, 4>& paths, int num_classes) {
  // Every header first, and the counts and extents they declare checked against each other,
  // before any data is inflated.
  std::array<IdxSource, 4> sources;
  for (std::size_t i = 0; i < 4; ++i)
    sources[i] = read_idx_header(paths[i], i % 2 == 0 ? IdxRole::kImages : IdxRole::kLabels);
  for (std::size_t i = 0; i < 4; i += 2) {
    check_idx_pair(sources[i].header.dims, sources[i].name, sources[i + 1].header.dims,
                   sources[i + 1].name);
  }
  std::array<NamedBytes, 4> files;
  std::array<IdxArray, 4> arrays;
  for (std::size_t i = 0; i < 4; ++i) {
    files[i].name = sources[i].name;
    arrays[i] = read_idx_data(std::move(sources[i]));
  }
  return load_idx_arrays(std::move(arrays), files, num_classes);
}

namespace {

struct CifarLayout {
  std::vector<std::string> train_files;
  std::string test_file;
  std::string names_file;
  std::string coarse_names_file;
  std::string subdirectory;
};

CifarLayout cifar_layout(bool cifar100) {
  if (cifar100) {
    return {{"train.bin"},
            "test.bin",
            "fine_label_names.txt",
            "coarse_label_names.txt",
            "cifar-100-binary"};
  }
  return {{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
           "data_batch_5.bin"},
          "test_batch.bin",
          "batches.meta.txt",
          "",
          "cifar-10-batches-bin"};
}

}  // namespace

LoadedDataset load_cifar(const std::string& path, bool cifar100,
                         const std::vector<std::string>& default_class_names,
                         const std::vector<std::string>& default_coarse_class_names) {
  const CifarLayout layout = cifar_layout(cifar100);
  std::set<std::string> wanted(layout.train_files.begin(), layout.train_files.end());
  wanted.insert(layout.test_file);
  wanted.insert(layout.names_file);
  if (!layout.coarse_names_file.empty()) wanted.insert(layout.coarse_names_file);

  std::map<std::string, std::vector<std::uint8_t>> members;
  if (fs::is_directory(path)) {
    std::string directory = path;
    if (!fs::exists(fs::join_path(directory, layout.test_file)) &&
        fs::is_directory(fs::join_path(path, layout.subdirectory))) {
      directory = fs::join_path(path, layout.subdirectory);
    }
    for (const auto& name : wanted) {
      const std::string file = fs::join_path(directory, name);
      if (fs::exists(file)) members[name] = fs::read_file(file);
    }
  } else {
    members = read_tar_members(path, wanted);
  }
  const std::string source = fs::base_name(path);
  const int num_classes = cifar100 ? 100 : 10;
  const int label_bytes = cifar100 ? 2 : 1;

  LoadedDataset dataset;
  dataset.num_classes = num_classes;
  for (const auto& name : layout.train_files) {
    if (!members.contains(name)) data_error(cat(source, ": ", name, " is missing"));
    append_images(dataset.train,
                  parse_cifar(members[name], label_bytes, num_classes, 20, source + "/" + name));
  }
  if (!members.contains(layout.test_file)) {
    data_error(cat(source, ": ", layout.test_file, " is missing"));
  }
  dataset.test = parse_cifar(members[layout.test_file], label_bytes, num_classes, 20,
                             source + "/" + layout.test_file);

  dataset.class_names = default_class_names;
  if (members.contains(layout.names_file)) {
    auto names = parse_class_name_lines(members[layout.names_file]);
    if (names.size() != static_cast<std::size_t>(num_classes)) {
      data_error(cat(source, ": ", layout.names_file, " lists ", names.size(),
                     " classes, expected ", num_classes));
    }
    dataset.class_names = std::move(names);
  }
  if (cifar100) {
    dataset.coarse_class_names = default_coarse_class_names;
    if (members.contains(layout.coarse_names_file)) {
      auto names = parse_class_name_lines(members[layout.coarse_names_file]);
      if (names.size() != 20) {
        data_error(cat(source, ": ", layout.coarse_names_file, " lists ", names.size(),
                       " superclasses, expected 20"));
      }
      dataset.coarse_class_names = std::move(names);
    }
  }
  return dataset;
}

void write_dataset(const std::string& path, const LoadedDataset& dataset, DatasetHeader header,
                   int deflate_level) {
  header.num_classes = dataset.num_classes;
  header.class_names = dataset.class_names;
  header.coarse_class_names = dataset.coarse_class_names;
  const bool coarse = !dataset.train.coarse_labels.empty() || !dataset.test.coarse_labels.empty();
  DatasetWriter writer(path, std::move(header), deflate_level);
  for (const auto& [split, images] :
       {std::pair{kTrain, &dataset.train}, std::pair{kTest, &dataset.test}}) {
    writer.write_split(split, images->shape, images->images, images->labels,
                       coarse ? std::optional<std::span<const std::int32_t>>(images->coarse_labels)
                              : std::nullopt);
  }
  writer.finish();
}

}  // namespace mbkit::data
