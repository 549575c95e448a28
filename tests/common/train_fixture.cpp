#include "train_fixture.hpp"

#include "mbkit/data/synth.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/util/log.hpp"

namespace mbkit::test {

void TrainFixture::SetUp() {
  world_of_ranks();
  log::set_level(log::Level::kQuiet);
  data::ToySynthOptions toy;
  toy.train = 96;
  toy.test = 20;
  toy.learnable = true;
  data::write_synth_toy(dir_.file("toy.h5"), toy, 0);
}

void TrainFixture::TearDown() {
  log::set_level(log::Level::kNormal);
}

train::TrainOptions TrainFixture::short_run(const std::string& checkpoint) const {
  train::TrainOptions o;
  o.data = dir_.file("toy.h5");
  o.model.name = "mlp";
  o.model.hidden = {8};
  o.batch_size = 16;
  o.threads = 1;
  o.checkpoint = dir_.file(checkpoint);
  return o;
}

std::vector<float> TrainFixture::parameters(const std::string& checkpoint) const {
  std::vector<float> all;
  for (const auto& array : train::read_checkpoint(dir_.file(checkpoint)).params) {
    all.insert(all.end(), array.values.begin(), array.values.end());
  }
  return all;
}

std::vector<std::vector<float>> TrainFixture::arrays(const std::string& checkpoint) const {
  const train::Checkpoint saved = train::read_checkpoint(dir_.file(checkpoint));
  std::vector<std::vector<float>> all;
  for (const auto* list : {&saved.params, &saved.state, &saved.optimizer_state}) {
    for (const auto& array : *list) all.push_back(array.values);
  }
  return all;
}

}  // namespace mbkit::test
