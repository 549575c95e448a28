// What the in-process training tests (tests/train: the engine as the tools call it, without
// mpirun) share: a small learnable toy dataset in a fresh directory, a quiet log, a short run's
// options and readers of the checkpoint arrays the tests compare.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mbkit/train/options.hpp"
#include "test_helpers.hpp"

namespace mbkit::test {

class TrainFixture : public ::testing::Test {
 protected:
  /// MPI's world (it starts once per process and ends at exit), a quiet log and `toy.h5`: the
  /// learnable toy problem, 96 training and 20 test samples, seed 0.
  void SetUp() override;
  void TearDown() override;

  /// An mlp with one hidden layer of 8 on `toy.h5`, batch 16, one thread, checkpointing to
  /// `checkpoint` in the directory. The optimizer, its learning rate and the steps are each
  /// test's.
  train::TrainOptions short_run(const std::string& checkpoint) const;

  /// The parameters of a checkpoint in the directory, every array after the other.
  std::vector<float> parameters(const std::string& checkpoint) const;

  /// Every array of a checkpoint in the directory that training changes (parameters, state,
  /// optimizer state), in order.
  std::vector<std::vector<float>> arrays(const std::string& checkpoint) const;

  TempDir dir_;
};

}  // namespace mbkit::test
