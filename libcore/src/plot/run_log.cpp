#include "mbkit/plot/run_log.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot {

RunLog RunLog::open(const std::string& path) {
  RunLog log;
  log.path_ = path;
  log.file_ = metrics::open_metric_log(path);
  try {
    log.info_ = metrics::read_run_info(log.file_);
  } catch (const Error&) {
    io::rethrow_as_damaged_file(path);
  }
  log.description_.file = path;
  if (!log.info_.config_json.empty()) {
    log.description_.fields = flatten_json_object(log.info_.config_json, cat(path, ": config"));
  }
  auto& fields = log.description_.fields;
  // Measured at start (--allreduce auto), not chosen: no label of a run.
  std::erase_if(fields,
                [](const auto& field) { return field.first.starts_with("allreduce_trial."); });
  // A single process exchanges nothing: its exchange options say nothing about it.
  if (log.info_.world_size <= 1) {
    for (const char* key :
         {"comm", "async", "async_min_grads", "allreduce", "comm_timeout", "comm_wait"}) {
      fields.erase(key);
    }
  }
  fields["tool"] = log.info_.tool;
  fields["world_size"] = cat(log.info_.world_size);
  if (!log.info_.model.empty()) fields["model"] = log.info_.model;
  if (!log.info_.dataset.empty()) fields["dataset"] = log.info_.dataset;
  try {
    if (log.file_.has_attribute("clock")) {
      const std::string clock = log.file_.string_attribute("clock");
      log.virtual_clock_ = clock == "virtual";
      fields["clock"] = clock;
    }
  } catch (const Error&) {
    io::rethrow_as_damaged_file(path);
  }
  return log;
}

std::string RunLog::field(const std::string& key) const {
  const auto it = description_.fields.find(key);
  return it == description_.fields.end() ? std::string() : it->second;
}

int RunLog::workers() const {
  const std::string workers = field("workers");
  if (!workers.empty()) {
    try {
      return static_cast<int>(parse_int(workers, "workers"));
    } catch (const Error&) {
      data_error(cat(path_, ": config workers '", workers, "' is not a number"));
    }
  }
  return info_.world_size;
}

std::optional<emulation::StragglerProfile> RunLog::straggler_profile() const {
  // The components as the run drew them (induce_spec), the name as the user gave it.
  const std::string induce = field("induce");
  // A replayed trace (--induce trace:FILE) has no distribution to draw.
  if (induce.starts_with("trace:")) return std::nullopt;
  std::string text = field("induce_spec");
  if (text.empty()) text = induce;
  std::optional<emulation::StragglerProfile> profile;
  try {
    profile = emulation::parse_straggler_profile(text);
  } catch (const Error& error) {
    data_error(cat(path_, ": config induce: ", error.what()));
  }
  if (profile && !induce.empty() && induce.find(':') == std::string::npos) profile->name = induce;
  return profile;
}

bool RunLog::has_column(const std::string& table, const std::string& column) const {
  try {
    return file_.has(table) && file_.open_group(table).has(column);
  } catch (const Error&) {
    io::rethrow_as_damaged_file(path_);
  }
}

std::size_t RunLog::rows(const std::string& table) const {
  if (const auto it = rows_.find(table); it != rows_.end()) return it->second;
  std::size_t rows = 0;
  try {
    if (file_.has(table)) {
      const io::Group group = file_.open_group(table);
      hsize_t common = std::numeric_limits<hsize_t>::max();
      for (const auto& name : group.member_names()) {
        const auto dims = group.open_dataset(name).dims();
        common = std::min(common, dims.empty() ? hsize_t{1} : dims[0]);
      }
      if (common != std::numeric_limits<hsize_t>::max()) {
        rows = static_cast<std::size_t>(metrics::readable_rows(file_, table, common));
      }
    }
  } catch (const Error&) {
    io::rethrow_as_damaged_file(path_);
  }
  rows_[table] = rows;
  return rows;
}

bool RunLog::has_finite_value(const std::string& table, const std::string& column) const {
  const auto& values = this->column(table, column);
  return std::any_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
}

const std::vector<double>& RunLog::column(const std::string& table,
                                          const std::string& column) const {
  const std::string key = cat("/", table, "/", column);
  if (const auto it = columns_.find(key); it != columns_.end()) return it->second;
  if (!has_column(table, column)) data_error(cat(path_, ": no dataset ", key));
  std::vector<double> values;
  try {
    values = file_.open_group(table).open_dataset(column).read<double>();
  } catch (const Error&) {
    io::rethrow_as_damaged_file(path_);
  }
  values.resize(std::min(values.size(), rows(table)));
  return columns_.emplace(key, std::move(values)).first->second;
}

}  // namespace mbkit::plot
