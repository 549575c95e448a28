#include "mbkit/report/bandwidth_report.hpp"

#include "mbkit/report/inputs.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::report {

bool is_bandwidth_file(const std::string& path) {
  return mbkit_format_of(path) == "mbkit-bandwidth";
}

std::vector<results::Run> read_bandwidth_runs(const std::vector<std::string>& paths) {
  std::vector<results::Run> runs;
  for (const auto& path : paths) {
    for (auto& run : results::read_runs(path)) runs.push_back(std::move(run));
  }
  return runs;
}

void write_bandwidth_table(const std::vector<results::Run>& runs, std::ostream& out) {
  out << "# bandwidth runs (mb-bench-bandwidth --append): time of one iteration over ranks, "
         "busbw as mb-bench-bandwidth.1 defines it\n"
      << "# ranks op " << std::string(results::column_header()).substr(2) << "\n";
  for (const auto& run : runs) {
    for (const auto& row : run.rows) {
      out << strprintf("%5d %-16s ", run.ranks, run.op.c_str()) << results::format_row(row) << "\n";
    }
  }
}

void write_bandwidth_csv(const std::vector<results::Run>& runs, std::ostream& out) {
  out << "ranks,op,mode,size,count,type,time_us,min_us,max_us,algbw_GBps,busbw_GBps,wrong\n";
  for (const auto& run : runs) {
    for (const auto& r : run.rows) {
      out << run.ranks << "," << csv_quote(run.op) << "," << csv_quote(r.op) << "," << r.bytes
          << "," << r.count << "," << csv_quote(r.type) << "," << shortest_decimal(r.avg_us) << ","
          << shortest_decimal(r.min_us) << "," << shortest_decimal(r.max_us) << ","
          << shortest_decimal(r.algbw_gbps) << "," << shortest_decimal(r.busbw_gbps) << ","
          << r.wrong << "\n";
    }
  }
}

void write_bandwidth_json(const std::vector<results::Run>& runs, std::ostream& out) {
  JsonWriter json(out);
  json.begin_array();
  for (const auto& run : runs) {
    json.begin_object();
    json.key("ranks").value(run.ranks);
    json.key("op").value(run.op);
    json.key("dtype").value(run.dtype);
    json.key("iters").value(run.iters);
    if (run.large_from > 0) {
      json.key("large_iters").value(run.large_iters);
      json.key("large_from").value(run.large_from);
    }
    json.key("hosts").value(run.hosts);
    json.key("created").value(run.created);
    json.key("rows").begin_array();
    for (const auto& r : run.rows) {
      json.begin_object();
      json.key("mode").value(r.op);
      json.key("size").value(static_cast<std::uint64_t>(r.bytes));
      json.key("count").value(static_cast<std::uint64_t>(r.count));
      json.key("time_us").value(r.avg_us);
      json.key("min_us").value(r.min_us);
      json.key("max_us").value(r.max_us);
      json.key("algbw_GBps").value(r.algbw_gbps);
      json.key("busbw_GBps").value(r.busbw_gbps);
      json.key("wrong").value(static_cast<std::int64_t>(r.wrong));
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();
  out << "\n";
}

}  // namespace mbkit::report
