#include "mbkit/tools/mb_eval.hpp"

#include <cmath>

#include "mbkit/backend/factory.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/config.hpp"
#include "mbkit/data/loader.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/train/evaluate.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/log.hpp"

namespace mbkit::tools::eval {
namespace {

void write_result(const std::string& path, const EvalOptions& options,
                  const mbkit::train::Checkpoint& checkpoint,
                  const mbkit::train::EvalResult& result, const std::vector<std::string>& names) {
  fs::AtomicOutput output(path);
  io::File file = io::File::create(output.temp_path());
  file.set_attribute("format", "mbkit-eval");
  file.set_attribute("format_version", 1);
  file.set_attribute("checkpoint", options.checkpoint);
  file.set_attribute("model", checkpoint.model);
  file.set_attribute("step", checkpoint.step);
  file.set_attribute("data", options.data);
  file.set_attribute("split", options.split);
  file.set_attribute("samples", static_cast<std::int64_t>(result.samples));
  file.set_attribute("loss", result.loss());
  file.set_attribute("accuracy", result.accuracy());
  file.set_attribute("top_k", result.top_k);
  file.set_attribute("top_k_accuracy", result.top_k_accuracy());
  file.set_attribute("created_by", cat("mb-eval ", MBKIT_VERSION));
  const auto k = static_cast<hsize_t>(result.classes);
  file.create_dataset<std::int64_t>("confusion", {k, k})
      .write(std::span<const std::int64_t>(result.confusion));
  const auto per_class = result.per_class_accuracy();
  file.create_dataset<double>("per_class_accuracy", {k}).write(std::span<const double>(per_class));
  if (!names.empty()) file.create_string_dataset("class_names", names);
  file.close();
  output.commit();
}

}  // namespace

int run_eval(const EvalOptions& options, std::ostream& out) {
  if (options.checkpoint.empty()) usage_error("no checkpoint given");
  if (options.data.empty()) usage_error("--data is required");
  if (options.split != "test" && options.split != "train") {
    usage_error(cat("--split: '", options.split, "' is not test or train"));
  }
  if (options.top_k < 1) usage_error("--top-k must be at least 1");
  if (options.batch_size < 1) usage_error("--batch-size must be at least 1");
  const nn::Precision precision = nn::parse_precision(options.precision);
  backend::check_precision(options.device, precision);
  if (!options.output.empty()) fs::require_replaceable(options.output, options.force);
  const comm::World world;
  const auto checkpoint = mbkit::train::read_checkpoint(options.checkpoint);
  // A NaN model scores as a constant guess: say so instead of reporting a number.
  mbkit::train::require_finite(checkpoint.params, options.checkpoint);
  mbkit::train::require_finite(checkpoint.state, options.checkpoint);

  data::LoaderOptions loader_options;
  loader_options.path = options.data;
  loader_options.split = options.split;
  loader_options.batch_size = options.batch_size;
  loader_options.shuffle = false;
  loader_options.slice_index = world.rank();
  loader_options.slice_count = world.size();
  loader_options.prefetch = 1;
  if (options.limit > 0 && world.size() > 1) {
    usage_error(
        "--limit cannot be combined with several ranks (each would take its own first rows)");
  }
  loader_options.limit = options.limit;
  data::DataLoader loader(loader_options);
  const data::ImageShape shape = loader.shape();
  const std::vector<std::int64_t> input = {shape.channels, shape.height, shape.width};
  if (checkpoint.input_shape != input || checkpoint.num_classes != loader.info().num_classes) {
    usage_error(cat(options.checkpoint, " is a model for ",
                    checkpoint.input_shape.size() == 3
                        ? cat(checkpoint.input_shape[0], "x", checkpoint.input_shape[1], "x",
                              checkpoint.input_shape[2])
                        : "?",
                    " inputs and ", checkpoint.num_classes, " classes; ", options.data, " has ",
                    shape.text(), " images in ", loader.info().num_classes, " classes"));
  }
  if (checkpoint.mean != loader.info().mean || checkpoint.std != loader.info().std) {
    log::warn(cat(options.data, " normalises with other mean/std than the training data of ",
                  options.checkpoint, " (", checkpoint.dataset, ")"));
  }
  const auto config = models::ModelConfig::from_map(checkpoint.model, checkpoint.model_config);
  auto backend = backend::make_backend(options.device, options.threads, precision);
  nn::Network net(models::build_model(config, {shape.channels, shape.height, shape.width},
                                      checkpoint.num_classes),
                  *backend);
  // Through host views: copied to the device once on a GPU, in place on the CPU.
  auto params = net.host_parameters();
  auto state = net.host_state();
  mbkit::train::load_arrays(checkpoint.params, net.graph().parameters(), params.values(),
                            options.checkpoint);
  mbkit::train::load_arrays(checkpoint.state, net.graph().state_arrays(), state.values(),
                            options.checkpoint);
  params.write_back();
  state.write_back();

  auto result = mbkit::train::evaluate(net, loader, options.top_k);
  result.reduce(world);
  if (world.rank() != 0) return 0;

  const auto& names = loader.info().class_names;
  auto class_name = [&](int c) {
    return names.empty() ? cat(c) : names[static_cast<std::size_t>(c)];
  };
  const auto per_class = result.per_class_accuracy();
  if (options.json) {
    JsonWriter json(out);
    json.begin_object();
    json.key("checkpoint").value(options.checkpoint);
    json.key("model").value(checkpoint.model);
    json.key("step").value(checkpoint.step);
    json.key("data").value(options.data);
    json.key("split").value(options.split);
    json.key("samples").value(result.samples);
    json.key("loss").value(result.loss());
    json.key("accuracy").value(result.accuracy());
    json.key("top_k").value(result.top_k);
    json.key("top_k_accuracy").value(result.top_k_accuracy());
    json.key("per_class_accuracy").begin_object();
    for (int c = 0; c < result.classes; ++c)
      json.key(class_name(c)).value(per_class[static_cast<std::size_t>(c)]);
    json.end_object();
    json.key("confusion").begin_array();
    for (int c = 0; c < result.classes; ++c) {
      json.array(std::vector<std::int64_t>(result.confusion.begin() + c * result.classes,
                                           result.confusion.begin() + (c + 1) * result.classes));
    }
    json.end_array();
    json.end_object();
  } else {
    out << strprintf("%-11s %s: %s, step %lld, trained on %s\n", "checkpoint",
                     options.checkpoint.c_str(), checkpoint.model.c_str(),
                     static_cast<long long>(checkpoint.step), checkpoint.dataset.c_str());
    out << strprintf("%-11s %s, %s split: %lld images%s\n", "data", options.data.c_str(),
                     options.split.c_str(), static_cast<long long>(result.samples),
                     world.size() > 1 ? cat(" over ", world.size(), " ranks").c_str() : "");
    out << strprintf("%-11s %.4f\n", "loss", result.loss());
    out << strprintf("%-11s %.2f%%\n", "accuracy", 100.0 * result.accuracy());
    out << strprintf("%-11s %.2f%%\n", cat("top-", result.top_k).c_str(),
                     100.0 * result.top_k_accuracy());
    out << "\nper class\n";
    for (int c = 0; c < result.classes; ++c) {
      const double a = per_class[static_cast<std::size_t>(c)];
      out << strprintf("  %-24s %s\n", class_name(c).c_str(),
                       std::isnan(a) ? "-" : strprintf("%6.2f%%", 100 * a).c_str());
    }
    if (result.classes <= 20) {
      out << "\nconfusion matrix (rows: true class, columns: predicted)\n     ";
      for (int p = 0; p < result.classes; ++p) out << strprintf(" %6d", p);
      out << '\n';
      for (int c = 0; c < result.classes; ++c) {
        out << strprintf("  %2d ", c);
        for (int p = 0; p < result.classes; ++p) {
          out << strprintf(" %6lld",
                           static_cast<long long>(
                               result.confusion[static_cast<std::size_t>(c * result.classes + p)]));
        }
        out << '\n';
      }
    } else {
      out << "\n(confusion matrix of " << result.classes << " classes: see --json or -o)\n";
    }
  }
  out.flush();
  if (!options.output.empty()) write_result(options.output, options, checkpoint, result, names);
  return 0;
}

}  // namespace mbkit::tools::eval
