#include "mbkit/tools/mb_dataset.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <new>
#include <numeric>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/data/sources.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/digest.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/log.hpp"

namespace mbkit::tools::dataset {
namespace {

std::string summary_line(const data::DatasetInfo& info) {
  return cat(info.name, ", ", info.split(data::kTrain).count, " train + ",
             info.split(data::kTest).count, " test images of ", info.shape().text(), ", ",
             info.num_classes, " classes");
}

void report_written(const std::string& path, double seconds) {
  const auto info = data::DatasetFile::open(path).info();
  log::info(cat("wrote ", path, ": ", summary_line(info), " (",
                human_bytes(double(fs::file_size(path))),
                seconds > 0 ? cat(", ", human_duration(seconds)) : "", ")"));
}

std::vector<std::string> parse_class_names(const std::string& spec) {
  if (spec.empty()) return {};
  if (spec.front() == '@') {
    const std::string text = fs::read_text_file(spec.substr(1));
    return data::parse_class_name_lines(
        std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
  }
  std::vector<std::string> names;
  for (const auto& part : split(spec, ',')) names.emplace_back(trim(part));
  return names;
}

data::ImageShape parse_shape(const std::string& text) {
  std::string normalized = text;
  std::replace(normalized.begin(), normalized.end(), 'x', ',');
  const auto parts = split(normalized, ',');
  if (parts.size() != 3) usage_error(cat("--shape '", text, "': expected C,H,W such as 3,224,224"));
  data::ImageShape shape;
  shape.channels = static_cast<int>(parse_int(parts[0], "--shape"));
  shape.height = static_cast<int>(parse_int(parts[1], "--shape"));
  shape.width = static_cast<int>(parse_int(parts[2], "--shape"));
  return shape;
}

// Class counts of a split, from its labels.
std::vector<std::uint64_t> class_counts(const data::DatasetFile& file, std::string_view split) {
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(file.info().num_classes), 0);
  for (const auto label : file.read_labels(split)) {
    if (label >= 0 && label < file.info().num_classes) ++counts[static_cast<std::size_t>(label)];
  }
  return counts;
}

std::string describe_counts(const std::vector<std::uint64_t>& counts) {
  if (counts.empty()) return "";
  const auto [low, high] = std::minmax_element(counts.begin(), counts.end());
  if (*low == *high) return cat(*low, " each");
  if (counts.size() <= 20) {
    std::vector<std::string> parts;
    for (const auto count : counts) parts.push_back(cat(count));
    return join(parts, " ");
  }
  return cat("min ", *low, ", max ", *high);
}

// What is known about a shard's source file: next to the shard, present and unchanged?
std::string shard_source_state(const std::string& shard_path, const data::ShardInfo& shard) {
  const std::string candidate = fs::join_path(fs::parent_directory(shard_path), shard.source_name);
  if (!fs::is_regular_file(candidate)) return "not found next to the shard";
  return digest_file(candidate).sha256 == shard.source_sha256 ? "present, checksum matches"
                                                              : "present, checksum DIFFERS";
}

bool all_chunks_checksummed(const data::DatasetFile& file) {
  for (const auto split : {data::kTrain, data::kTest}) {
    for (const char* column : {"images", "labels"}) {
      const auto dataset = file.file().open_dataset(cat(split, "/", column));
      if (dataset.dims().at(0) == 0) continue;  // empty splits are stored unchunked
      const auto filters = dataset.filters();
      if (std::find(filters.begin(), filters.end(), H5Z_FILTER_FLETCHER32) == filters.end()) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

int run_fetch(const data::FetchOptions& options) {
  const auto report = data::fetch_dataset(options);
  if (report.kept_existing) {
    log::info(cat("kept ", report.output, ": already a valid ", report.info.name,
                  " dataset (--force rebuilds it)"));
  } else {
    report_written(report.output, report.seconds);
  }
  return 0;
}

int run_import(const ImportOptions& options) {
  if (options.output.empty()) usage_error("no output file given (-o FILE)");
  if (options.deflate_level < 0 || options.deflate_level > 9) {
    usage_error(cat("--compression ", options.deflate_level, " is not in 0..9"));
  }
  const bool idx = options.format == "idx";
  const bool cifar = options.format == "cifar10" || options.format == "cifar100";
  if (!idx && !cifar) {
    usage_error(
        cat("import: unknown format '", options.format, "' (known: idx, cifar10, cifar100)"));
  }
  std::vector<std::string> inputs;
  if (idx) {
    const char* const flags[] = {"--train-images", "--train-labels", "--test-images",
                                 "--test-labels"};
    for (std::size_t i = 0; i < 4; ++i) {
      if (options.idx_files[i].empty()) usage_error(cat("import idx needs ", flags[i]));
      inputs.push_back(options.idx_files[i]);
    }
    if (options.num_classes < 0) usage_error("--num-classes must not be negative");
  } else {
    if (options.from.empty()) usage_error(cat("import ", options.format, " needs --from PATH"));
    inputs.push_back(options.from);
  }
  const auto started = std::chrono::steady_clock::now();
  fs::require_replaceable(options.output, options.force);
  fs::AtomicOutput output(options.output);  // fails before reading large inputs if unwritable

  data::LoadedDataset dataset;
  data::DatasetHeader header;
  if (idx) {
    try {
      dataset = data::load_idx_files(options.idx_files, options.num_classes);
    } catch (const std::bad_alloc&) {
      fail(cat("import idx: out of memory while reading ",
               join({options.idx_files.begin(), options.idx_files.end()}, ", "), " into memory"));
    }
    header.name = options.name.empty() ? "idx-dataset" : options.name;
    header.source = fs::parent_directory(options.idx_files[0]);
  } else {
    const auto* entry = data::find_catalog_entry(options.format);
    dataset = data::load_cifar(options.from, options.format == "cifar100", entry->class_names,
                               entry->coarse_class_names);
    header.name = options.name.empty() ? options.format : options.name;
    header.source = options.from;
  }
  if (!options.class_names.empty()) dataset.class_names = parse_class_names(options.class_names);
  if (!dataset.class_names.empty() &&
      dataset.class_names.size() != static_cast<std::size_t>(dataset.num_classes)) {
    usage_error(cat("--class-names lists ", dataset.class_names.size(), " names for ",
                    dataset.num_classes, " classes"));
  }
  for (const auto& input : inputs) {
    if (fs::is_regular_file(input)) {
      header.source_files.push_back({fs::base_name(input), digest_file(input).sha256});
    }
  }
  try {
    data::write_dataset(output.temp_path(), dataset, std::move(header), options.deflate_level);
  } catch (const std::bad_alloc&) {
    fail(cat("import: out of memory while writing ", options.output));
  }
  output.commit();
  report_written(options.output,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}

int run_synth(SynthOptions options) {
  if (options.output.empty()) usage_error("no output file given (-o FILE)");
  if (options.deflate_level < 0 || options.deflate_level > 9) {
    usage_error(cat("--compression ", options.deflate_level, " is not in 0..9"));
  }
  const auto started = std::chrono::steady_clock::now();
  fs::require_replaceable(options.output, options.force);
  fs::AtomicOutput output(options.output);
  if (options.kind == "toy") {
    data::write_synth_toy(output.temp_path(), options.toy, options.deflate_level);
  } else if (options.kind == "images") {
    if (!options.shape.empty()) options.images.shape = parse_shape(options.shape);
    data::write_synth_images(output.temp_path(), options.images, options.deflate_level);
  } else {
    usage_error(cat("synth: unknown kind '", options.kind, "' (known: toy, images)"));
  }
  output.commit();
  report_written(options.output,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}

int run_shard(const data::ShardOptions& options, std::ostream& out) {
  const auto started = std::chrono::steady_clock::now();
  const auto paths = data::shard_dataset(options);
  for (const auto& path : paths) out << path << '\n';
  out.flush();
  log::info(
      cat("wrote ", paths.size(), " shards of ", options.input, " (",
          data::shard_method_name(options.method), ") in ",
          human_duration(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count())));
  return 0;
}

int run_info(const InfoOptions& options, std::ostream& out) {
  const auto file = data::DatasetFile::open(options.path);
  const data::DatasetInfo& info = file.info();
  const auto size = fs::file_size(options.path);
  const bool checksummed = all_chunks_checksummed(file);
  std::vector<std::vector<std::uint64_t>> counts;
  for (const auto& split : info.splits) counts.push_back(class_counts(file, split.name));
  const std::string shard_state = info.shard ? shard_source_state(options.path, *info.shard) : "";

  if (options.json) {
    JsonWriter json(out);
    json.begin_object();
    json.key("file").value(options.path);
    json.key("size_bytes").value(static_cast<std::uint64_t>(size));
    json.key("format").value(std::string(data::kFormatName));
    json.key("format_version").value(info.format_version);
    json.key("created_by").value(info.created_by);
    json.key("name").value(info.name);
    json.key("num_classes").value(info.num_classes);
    json.key("class_names").array(info.class_names);
    json.key("image_shape").begin_array();
    json.value(info.shape().channels).value(info.shape().height).value(info.shape().width);
    json.end_array();
    json.key("mean").array(info.mean);
    json.key("std").array(info.std);
    json.key("source").value(info.source);
    json.key("source_files").begin_array();
    for (const auto& source : info.source_files) {
      json.begin_object()
          .key("name")
          .value(source.name)
          .key("sha256")
          .value(source.sha256)
          .end_object();
    }
    json.end_array();
    json.key("chunk_checksums").value(checksummed);
    json.key("splits").begin_object();
    for (std::size_t i = 0; i < info.splits.size(); ++i) {
      json.key(info.splits[i].name).begin_object();
      json.key("count").value(info.splits[i].count);
      json.key("class_counts").array(counts[i]);
      json.end_object();
    }
    json.end_object();
    json.key("shard");
    if (info.shard) {
      json.begin_object();
      json.key("index").value(info.shard->index);
      json.key("count").value(info.shard->count);
      json.key("method").value(info.shard->method);
      json.key("seed").value(info.shard->seed);
      json.key("source").value(info.shard->source_name);
      json.key("source_sha256").value(info.shard->source_sha256);
      json.key("source_state").value(shard_state);
      json.end_object();
    } else {
      json.null();
    }
    json.end_object();
    return 0;
  }

  auto row = [&out](const std::string& key, const std::string& value) {
    out << strprintf("%-10s %s\n", key.c_str(), value.c_str());
  };
  row("file", cat(options.path, "  (", human_bytes(double(size)), ", ", data::kFormatName, " v",
                  info.format_version, info.created_by.empty() ? "" : ", " + info.created_by, ")"));
  row("name", info.name);
  row("source", info.source);
  row("classes", info.class_names.empty()
                     ? cat(info.num_classes)
                     : cat(info.num_classes, ": ", join(info.class_names, ", ")));
  row("images", cat(info.shape().text(), " uint8 (C x H x W)"));
  std::vector<std::string> means, stds;
  for (std::size_t c = 0; c < info.mean.size(); ++c) {
    means.push_back(strprintf("%.4f", info.mean[c]));
    stds.push_back(strprintf("%.4f", info.std[c]));
  }
  row("mean", join(means, " "));
  row("std", join(stds, " "));
  if (info.shard) {
    row("shard", cat(info.shard->index, " of ", info.shard->count, " (", info.shard->method,
                     info.shard->method == "random" ? cat(", seed ", info.shard->seed) : "",
                     ") of ", info.shard->source_name));
    row("", cat("source ", shard_state, "; sha256 ", info.shard->source_sha256));
  }
  out << '\n' << strprintf("%-10s %8s  %s\n", "split", "images", "per class");
  for (std::size_t i = 0; i < info.splits.size(); ++i) {
    out << strprintf("%-10s %8llu  %s\n", info.splits[i].name.c_str(),
                     static_cast<unsigned long long>(info.splits[i].count),
                     describe_counts(counts[i]).c_str());
  }
  out << '\n';
  if (!info.source_files.empty()) {
    out << "source files (SHA-256, as sha256sum prints them):\n";
    for (const auto& source : info.source_files)
      out << "  " << source.sha256 << "  " << source.name << '\n';
  }
  row("checksums", checksummed ? "Fletcher-32 on every chunk (mb-dataset verify reads them all)"
                               : "no chunk checksums");
  return 0;
}

int run_verify(const VerifyOptions& options, std::ostream& out) {
  if (options.paths.empty()) usage_error("verify: no file given");
  bool all_ok = true;
  std::vector<data::VerifyReport> reports;
  for (const auto& path : options.paths) {
    reports.push_back(data::verify(path));
    const auto& report = reports.back();
    all_ok = all_ok && report.ok();
    if (options.json) continue;
    if (report.ok()) {
      out << path << ": OK (" << summary_line(report.info)
          << (report.info.shard
                  ? cat(", shard ", report.info.shard->index, " of ", report.info.shard->count)
                  : "")
          << ")\n";
    } else {
      // One line per file: the first problem, and how many more (--json lists them all).
      const std::size_t more = report.problems.size() - 1;
      std::fprintf(stderr, "%s: error: %s%s\n", log::program().c_str(),
                   report.problems.front().c_str(),
                   more > 0 ? cat(" (and ", more, " more problems)").c_str() : "");
    }
  }
  if (options.json) {
    JsonWriter json(out);
    json.begin_array();
    for (std::size_t i = 0; i < reports.size(); ++i) {
      json.begin_object();
      json.key("file").value(options.paths[i]);
      json.key("ok").value(reports[i].ok());
      json.key("problems").array(reports[i].problems);
      json.end_object();
    }
    json.end_array();
  }
  out.flush();
  return all_ok ? 0 : static_cast<int>(ExitCode::kBadData);
}

}  // namespace mbkit::tools::dataset
