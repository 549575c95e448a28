// The measured points of a --comm-model file and their price on the virtual clock
// (measured_times.hpp): linear in bytes between the sizes around a size, the smallest's time
// below them, the last two's slope (or the fitted beta) beyond them.
#include <gtest/gtest.h>

#include <vector>

#include "mbkit/train/measured_times.hpp"

namespace mbkit::train {
namespace {

// A link whose time is no line: 0.2 ms flat up to 64 KiB, then 10 ns/B, then 30 ns/B.
const std::vector<double> kBytes = {8, 65536, 524288, 1048576};
const std::vector<double> kSeconds = {2e-4, 2.1e-4, 5e-3, 2e-2};

TEST(MeasuredTimes, ExactSizesGiveTheMeasuredTime) {
  const MeasuredTimes times = measured_times(kBytes, kSeconds, 1e-8);
  for (std::size_t i = 0; i < kBytes.size(); ++i) {
    EXPECT_EQ(times.at(kBytes[i]), kSeconds[i]) << kBytes[i];
  }
}

TEST(MeasuredTimes, ASizeBetweenTwoPointsIsInterpolatedLinearlyInBytes) {
  const MeasuredTimes times = measured_times(kBytes, kSeconds, 1e-8);
  // 814 kB between 512 KiB and 1 MiB: (814000 - 524288) / 524288 of the way from 5 to 20 ms.
  EXPECT_DOUBLE_EQ(times.at(814000), 5e-3 + (814000.0 - 524288) / 524288 * 1.5e-2);
  // Halfway between 8 B and 64 KiB: halfway between their times.
  EXPECT_DOUBLE_EQ(times.at((8 + 65536) / 2.0), 2.05e-4);
}

TEST(MeasuredTimes, BelowTheSmallestIsTheSmallestsTimeBeyondTheLargestTheLastSlope) {
  const MeasuredTimes times = measured_times(kBytes, kSeconds, 1e-8);
  EXPECT_EQ(times.at(0), 2e-4);
  EXPECT_EQ(times.at(1), 2e-4);
  const double last_slope = (2e-2 - 5e-3) / (1048576.0 - 524288);
  EXPECT_DOUBLE_EQ(times.slope_beyond, last_slope);
  EXPECT_DOUBLE_EQ(times.at(4 * 1048576.0), 2e-2 + last_slope * 3 * 1048576.0);
  // A last pair that falls (noise at the top): the fitted beta beyond, never cheaper.
  const std::vector<double> falling = {2e-4, 2.1e-4, 5e-3, 4e-3};
  const MeasuredTimes noisy = measured_times(kBytes, falling, 1e-8);
  EXPECT_EQ(noisy.slope_beyond, 1e-8);
  EXPECT_DOUBLE_EQ(noisy.at(2 * 1048576.0), 4e-3 + 1e-8 * 1048576.0);
}

TEST(MeasuredTimes, PointsAreSortedAndEqualSizesAveraged) {
  // Two pairs' points together, out of order: the mean per size.
  const std::vector<double> bytes = {1024, 8, 8, 1024};
  const std::vector<double> seconds = {3e-5, 1e-5, 2e-5, 5e-5};
  const MeasuredTimes times = measured_times(bytes, seconds, 0);
  EXPECT_EQ(times.bytes, (std::vector<double>{8, 1024}));
  ASSERT_EQ(times.seconds.size(), 2u);
  EXPECT_DOUBLE_EQ(times.seconds[0], 1.5e-5);
  EXPECT_DOUBLE_EQ(times.seconds[1], 4e-5);
}

TEST(MeasuredTimes, PointsThatCannotPriceMessagesAreNamed) {
  EXPECT_EQ(measured_times_problem(kBytes, kSeconds), "");
  const std::vector<double> two = {8, 16}, three = {1e-5, 2e-5, 3e-5};
  EXPECT_EQ(measured_times_problem(two, three), "2 sizes for 3 times");
  const std::vector<double> same = {8, 8}, times = {1e-5, 2e-5};
  EXPECT_EQ(measured_times_problem(same, times), "fewer than two different sizes");
  const std::vector<double> negative = {1e-5, -2e-5};
  EXPECT_NE(measured_times_problem(two, negative).find("is not a positive number"),
            std::string::npos);
  const std::vector<double> bad_size = {8, -16};
  EXPECT_NE(measured_times_problem(bad_size, times).find("is not a number of bytes"),
            std::string::npos);
}

TEST(MeasuredTimes, ItsValuesAndDescription) {
  const std::vector<double> bytes = {8, 1024}, seconds = {1.5e-5, 4e-5};
  const MeasuredTimes times = measured_times(bytes, seconds, 0);
  EXPECT_EQ(times.spec(), " points 8:1.5e-05,1024:4.0000000000000003e-05");
  EXPECT_EQ(MeasuredTimes{}.spec(), "");
  EXPECT_NE(times.describe().find("interpolating 2 measured sizes"), std::string::npos);
}

}  // namespace
}  // namespace mbkit::train
