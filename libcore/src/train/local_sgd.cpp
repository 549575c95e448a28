#include "mbkit/train/local_sgd.hpp"

#include <algorithm>

#include "mbkit/util/check.hpp"

namespace mbkit::train {

std::size_t model_floats(const nn::Network& net, optim::Optimizer& optimizer) {
  return net.parameter_count() + optimizer.state().size() * optimizer.size();
}

void read_model(nn::Network& net, optim::Optimizer& optimizer, std::span<float> model) {
  MBKIT_CHECK(model.size() == model_floats(net, optimizer), "a model of ", model.size(), " floats");
  const std::span<const float> parameters = net.parameters();
  auto out = std::copy(parameters.begin(), parameters.end(), model.begin());
  for (auto& [name, buffer] : optimizer.state()) {
    const nn::HostView view(net.backend(), *buffer, 0, optimizer.size());
    out = std::copy(view.values().begin(), view.values().end(), out);
  }
}

void write_model(std::span<const float> model, nn::Network& net, optim::Optimizer& optimizer) {
  MBKIT_CHECK(model.size() == model_floats(net, optimizer), "a model of ", model.size(), " floats");
  auto in = model.begin();
  const std::span<float> parameters = net.parameters();
  std::copy_n(in, parameters.size(), parameters.begin());
  in += static_cast<std::ptrdiff_t>(parameters.size());
  for (auto& [name, buffer] : optimizer.state()) {
    nn::HostView view(net.backend(), *buffer, 0, optimizer.size());
    std::copy_n(in, view.size(), view.values().begin());
    view.write_back();
    in += static_cast<std::ptrdiff_t>(view.size());
  }
}

void finish_average(std::span<float> model, int workers) {
  // As the exchange averages the state: one factor, so every transport gives the same bits.
  const float inverse = 1.0f / static_cast<float>(workers);
  for (float& v : model) v *= inverse;
}

LocalModels::LocalModels(int workers, std::size_t model, std::size_t state)
    : model_(model), state_(state), copies_(static_cast<std::size_t>(workers) * (model + state)) {}

std::span<float> LocalModels::copy(int w) {
  return std::span(copies_).subspan(static_cast<std::size_t>(w) * (model_ + state_),
                                    model_ + state_);
}

std::span<const float> LocalModels::model(int w) const {
  return std::span(copies_).subspan(static_cast<std::size_t>(w) * (model_ + state_), model_);
}

std::span<const float> LocalModels::state(int w) const {
  return std::span(copies_).subspan(static_cast<std::size_t>(w) * (model_ + state_) + model_,
                                    state_);
}

void LocalModels::set_all(nn::Network& net, optim::Optimizer& optimizer) {
  const int workers = static_cast<int>(copies_.size() / std::max<std::size_t>(1, model_ + state_));
  for (int w = 0; w < workers; ++w) store(w, net, optimizer);
}

void LocalModels::load(int w, nn::Network& net, optim::Optimizer& optimizer) const {
  write_model(model(w), net, optimizer);
  const std::span<const float> saved = state(w);
  std::copy(saved.begin(), saved.end(), net.state().begin());
}

void LocalModels::store(int w, nn::Network& net, optim::Optimizer& optimizer) {
  const std::span<float> to = copy(w);
  read_model(net, optimizer, to.first(model_));
  const std::span<const float> state = net.state();
  std::copy(state.begin(), state.end(), to.begin() + static_cast<std::ptrdiff_t>(model_));
}

double LocalSgdClock::add(const std::vector<SyncWorkerTime>& rounds) {
  if (period_.empty()) period_.assign(rounds.size(), SyncWorkerTime{});
  MBKIT_CHECK(period_.size() == rounds.size(), rounds.size(), " rounds for ", period_.size(),
              " workers");
  const double before = elapsed_;
  for (std::size_t w = 0; w < rounds.size(); ++w) {
    period_[w].delay += rounds[w].delay;
    period_[w].compute += rounds[w].compute;
    elapsed_ = std::max(elapsed_, period_[w].delay + period_[w].compute);
  }
  return before;
}

double LocalSgdClock::local_step(const std::vector<SyncWorkerTime>& rounds) {
  const double before = add(rounds);
  return elapsed_ - before;
}

SyncStepTime LocalSgdClock::averaging_step(const std::vector<SyncWorkerTime>& rounds,
                                           bool parameter_server, const CommModel& comm,
                                           std::uint64_t bytes) {
  const double before = add(rounds);
  SyncStepTime timing = sync_step_time(period_, parameter_server, comm, bytes, 0.0);
  // The step's own share: the rest of the period after the steps before it.
  timing.end -= before;
  timing.gather -= before;
  period_.clear();
  elapsed_ = 0;
  return timing;
}

}  // namespace mbkit::train
