#include "mbkit/data/fetch.hpp"

#include <chrono>
#include <filesystem>
#include <optional>

#include "mbkit/data/archive.hpp"
#include "mbkit/data/dataset_file.hpp"
#include "mbkit/data/download.hpp"
#include "mbkit/data/sources.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/digest.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"

namespace mbkit::data {

std::map<std::string, std::string> parse_checksum_list(const std::string& text,
                                                       const std::string& list_name) {
  std::map<std::string, std::string> digests;
  int line_number = 0;
  for (const auto& raw_line : split(text, '\n')) {
    ++line_number;
    const auto line = trim(raw_line);
    if (line.empty() || line.front() == '#') continue;
    const auto space = line.find_first_of(" \t");
    std::string digest = to_lower(line.substr(0, space));
    std::string_view name = space == std::string_view::npos ? "" : trim(line.substr(space));
    if (!name.empty() && name.front() == '*') name.remove_prefix(1);  // binary-mode marker
    const bool hex = digest.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (name.empty() || !hex || (digest.size() != 32 && digest.size() != 64)) {
      data_error(
          cat(list_name, ": line ", line_number, " is not '<md5 or sha256 in hex>  <file name>'"));
    }
    digests[fs::base_name(std::string(name))] = digest;
  }
  return digests;
}

namespace {

using Clock = std::chrono::steady_clock;

struct ChecksumPolicy {
  std::map<std::string, std::string> overrides;  // from --checksums
  bool have_overrides = false;
  bool no_checksum = false;
};

// Checks one source file against the published checksum (or --checksums), and returns the
// SHA-256 of its bytes for the dataset's provenance attributes. `shown_as` names the file in
// messages (the URL of a download rather than its temporary).
std::string verify_source_file(const CatalogFile& spec, const std::string& path,
                               const ChecksumPolicy& policy, const std::string& shown_as) {
  const FileDigests digests = digest_file(path);
  std::string problem;
  if (policy.have_overrides) {
    const auto found = policy.overrides.find(spec.name);
    if (found == policy.overrides.end()) {
      problem = "no checksum for it in the --checksums list";
    } else {
      const std::string& actual = found->second.size() == 32 ? digests.md5 : digests.sha256;
      if (actual != found->second) {
        problem = cat("checksum mismatch: ", found->second.size() == 32 ? "md5 " : "sha256 ",
                      actual, ", expected ", found->second);
      }
    }
  } else if (digests.md5 != spec.md5) {
    bool content_matches = false;
    if (!spec.content_sha256.empty()) {
      // A recompressed copy (e.g. Debian's) holds the same data under another archive checksum.
      content_matches = sha256_hex(read_maybe_gzipped(path)) == spec.content_sha256;
      if (content_matches) {
        log::verbose(cat(spec.name,
                         ": archive differs from the published one but its content "
                         "matches the published data"));
      }
    }
    if (!content_matches) {
      problem = cat("checksum mismatch: md5 ", digests.md5, ", published ", spec.md5);
    }
  }
  if (!problem.empty()) {
    if (!policy.no_checksum) {
      data_error(cat(shown_as, ": ", problem,
                     " (a damaged or different file; --checksums FILE or --no-checksum accepts "
                     "other copies)"));
    }
    log::warn(cat(shown_as, ": ", problem, "; accepted because of --no-checksum"));
  }
  return digests.sha256;
}

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec1, ec2;
  const auto canonical_a = std::filesystem::weakly_canonical(a, ec1);
  const auto canonical_b = std::filesystem::weakly_canonical(b, ec2);
  return !ec1 && !ec2 && canonical_a == canonical_b;
}

// The path of each catalog file in a local directory (published name, or the same name
// without .gz for copies that were decompressed), or the file itself for one-file datasets.
std::vector<std::string> locate_local_files(const CatalogEntry& entry, const std::string& from) {
  std::vector<std::string> paths;
  if (!fs::is_directory(from)) {
    if (entry.files.size() != 1) {
      std::vector<std::string> names;
      for (const auto& file : entry.files) names.push_back(file.name);
      usage_error(
          cat("--from ", from, ": ", entry.name, " needs a directory holding ", join(names, ", ")));
    }
    paths.push_back(from);
    return paths;
  }
  for (const auto& file : entry.files) {
    std::string path = fs::join_path(from, file.name);
    if (!fs::exists(path) && ends_with(file.name, ".gz")) {
      const std::string plain = fs::join_path(from, file.name.substr(0, file.name.size() - 3));
      if (fs::exists(plain)) path = plain;
    }
    if (!fs::exists(path)) data_error(cat("--from ", from, ": ", file.name, " not found"));
    paths.push_back(path);
  }
  return paths;
}

// A verified source file and the SHA-256 of its bytes.
struct VerifiedSource {
  std::string path;
  std::string sha256;
};

// Downloads one file into the cache (or finds it there), trying each base URL in turn.
VerifiedSource fetch_into_cache(const CatalogFile& spec, const std::vector<std::string>& bases,
                                const std::string& cache, const ChecksumPolicy& policy,
                                const FetchOptions& options, std::string& used_base) {
  const std::string cached = fs::join_path(cache, spec.name);
  if (fs::exists(cached)) {
    try {
      VerifiedSource verified{cached, verify_source_file(spec, cached, policy, cached)};
      log::verbose(cat("using cached ", cached));
      used_base = "cache";
      return verified;
    } catch (const Error& error) {
      log::warn(cat("cached ", cached, " is not usable (", error.what(), "); downloading again"));
    }
  }
  std::vector<std::string> failures;
  for (const auto& base : bases) {
    const std::string url = base + (ends_with(base, "/") ? "" : "/") + spec.name;
    try {
      fs::AtomicOutput partial(cached);
      log::verbose(cat("downloading ", url));
      DownloadOptions download_options;
      download_options.retries = options.retries;
      download_options.stall_timeout = options.stall_timeout;
      download_options.expected_size = spec.size;
      download_options.label = spec.name;
      download(url, partial.temp_path(), download_options);
      VerifiedSource verified{cached, verify_source_file(spec, partial.temp_path(), policy, url)};
      partial.commit();
      used_base = base;
      return verified;
    } catch (const Error& error) {
      if (bases.size() == 1) throw;
      failures.push_back(error.what());
      log::warn(cat(error.what(), "; trying the next mirror"));
    }
  }
  communication_error(cat("could not get ", spec.name, " from any mirror: ", join(failures, "; ")));
}

}  // namespace

FetchReport fetch_dataset(const FetchOptions& options) {
  const auto start = Clock::now();
  const CatalogEntry* entry = find_catalog_entry(options.name);
  if (entry == nullptr) {
    usage_error(cat("unknown dataset '", options.name, "' (known: ", known_dataset_names(), ")"));
  }
  if (options.output.empty()) usage_error("no output file given (-o FILE)");
  if (!options.from.empty() && !options.mirror.empty()) {
    usage_error("--from and --mirror cannot be used together");
  }
  if (options.deflate_level < 0 || options.deflate_level > 9) {
    usage_error(cat("--compression ", options.deflate_level, " is not in 0..9"));
  }
  if (options.retries < 0) usage_error("--retries must not be negative");
  if (!options.from.empty() && !fs::exists(options.from)) {
    data_error(cat("--from ", options.from, ": no such file or directory"));
  }
  if (options.no_checksum && !options.checksums_file.empty()) {
    usage_error("--checksums and --no-checksum cannot be used together");
  }
  ChecksumPolicy policy;
  policy.no_checksum = options.no_checksum;
  if (!options.checksums_file.empty()) {
    policy.overrides =
        parse_checksum_list(fs::read_text_file(options.checksums_file), options.checksums_file);
    policy.have_overrides = true;
  }

  const std::string output_directory = fs::parent_directory(options.output);
  if (!fs::is_directory(output_directory)) {
    fail(cat("cannot write ", options.output, ": directory ", output_directory,
             fs::exists(output_directory) ? " is not a directory" : " does not exist"));
  }
  // Every rank of an mpirun may run this at once: the first does the work, the others then
  // find a valid output and keep it.
  fs::DirectoryLock output_lock(output_directory);

  FetchReport report;
  report.output = options.output;
  if (fs::exists(options.output) && !options.force) {
    std::optional<DatasetInfo> existing;
    try {
      existing = DatasetFile::open(options.output).info();
    } catch (const Error&) {
    }
    if (existing && existing->name == entry->name && !existing->shard) {
      report.kept_existing = true;
      report.info = *existing;
      report.source = existing->source;
      report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      return report;
    }
    usage_error(cat(options.output, " exists and is not a ", entry->name,
                    " dataset; use --force to replace it"));
  }
  fs::AtomicOutput output(options.output);  // fails now, before any download, if unwritable

  std::vector<VerifiedSource> sources;
  std::string source;
  std::string local = options.from;
  if (local.empty() && options.mirror.empty() && !entry->system_directory.empty() &&
      fs::is_directory(entry->system_directory)) {
    local = entry->system_directory;
    log::info(cat("using ", local, " (Debian package ", entry->system_package, ")"));
  }
  if (!local.empty()) {
    const auto paths = locate_local_files(*entry, local);
    for (std::size_t i = 0; i < paths.size(); ++i) {
      sources.push_back(
          {paths[i], verify_source_file(entry->files[i], paths[i], policy, paths[i])});
    }
    source = std::filesystem::absolute(local).lexically_normal().string();
  } else {
    const std::vector<std::string> bases =
        options.mirror.empty() ? entry->mirrors : std::vector<std::string>{options.mirror};
    const std::string cache_root =
        options.cache_dir.empty() ? fs::default_cache_directory() : options.cache_dir;
    const std::string cache = fs::join_path(fs::join_path(cache_root, "datasets"), entry->name);
    fs::make_directories(cache);
    std::optional<fs::DirectoryLock> cache_lock;
    if (!same_directory(cache, output_directory)) cache_lock.emplace(cache);
    std::string used_base;
    for (const auto& file : entry->files) {
      sources.push_back(fetch_into_cache(file, bases, cache, policy, options, used_base));
    }
    source = used_base == "cache" ? bases.front() : used_base;
  }

  DatasetHeader header;
  header.name = entry->name;
  header.source = source;
  for (std::size_t i = 0; i < entry->files.size(); ++i) {
    header.source_files.push_back({entry->files[i].name, sources[i].sha256});
  }

  LoadedDataset dataset;
  switch (entry->format) {
    case SourceFormat::kIdx:
      dataset = load_idx_files({sources[0].path, sources[1].path, sources[2].path, sources[3].path},
                               entry->num_classes);
      dataset.class_names = entry->class_names;
      break;
    case SourceFormat::kCifar10:
    case SourceFormat::kCifar100:
      dataset = load_cifar(sources[0].path, entry->format == SourceFormat::kCifar100,
                           entry->class_names, entry->coarse_class_names);
      break;
  }
  write_dataset(output.temp_path(), dataset, std::move(header), options.deflate_level);
  output.commit();

  report.source = source;
  report.info = DatasetFile::open(options.output).info();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace mbkit::data
