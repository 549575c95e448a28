// Legend labels: each run is named by what sets it apart from the other runs of the figure
// (tool, batch size, time limit, workers...), read from the configuration the run stored,
// as the AMB original named runs by the tokens of their directory names that differ.
#pragma once

#include <string>
#include <vector>

#include "mbkit/plot/config.hpp"

namespace mbkit::plot {

/// What a run is labelled from: its configuration (root attribute "config", flattened) plus
/// the log's other root attributes (tool, world_size, model, dataset), and its file.
struct RunDescription {
  std::string file;
  FlatConfig fields;
};

/// One label per run, in order. Fields whose values differ between the runs that have them are
/// shown in a fixed order
/// of importance (tool, comm, async, batch_size, time limit, workers, stragglers, optimizer,
/// lr...), each in a short form ("FMB", "B=64", "4 workers", "cedar"), joined by ", ". Fields
/// that follow from others (world_size beside workers, global_batch_size, parameters,
/// planned_steps, induce_spec) and those in `ignore` are not shown. Other differing fields
/// ("key=value") are added only while the labels are not yet unique. When nothing tells the runs
/// apart, or the labels still collide, file names are used (base names without ".h5", whole
/// paths when those collide too). A single run is labelled by its file name.
std::vector<std::string> derive_labels(const std::vector<RunDescription>& runs,
                                       const std::vector<std::string>& ignore = {});

/// Labels that group runs: runs that differ only in `ignore`d (and derived) fields get the same
/// label, made of every other differing field ("" when nothing else differs). The
/// series of a scaling figure are such groups, with the worker counts ignored.
std::vector<std::string> group_labels(const std::vector<RunDescription>& runs,
                                      const std::vector<std::string>& ignore);

/// The short form of one field: ("batch_size", "64") -> "B=64", ("async", "true") -> "async".
std::string describe_field(const std::string& key, const std::string& value);

/// "run" for "dir/run.h5".
std::string file_stem(const std::string& path);

}  // namespace mbkit::plot
