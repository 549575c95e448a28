#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "mbkit/util/json.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit {
namespace {

TEST(Strings, NearestNamesForADidYouMeanHint) {
  const std::vector<std::string> options = {
      "epochs", "eval-every", "batch-size", "global-batch-size", "lr", "lr-schedule",
      "seed",   "verbose",    "version"};
  EXPECT_EQ(edit_distance("epoch", "epochs"), 1u);
  EXPECT_EQ(edit_distance("epcohs", "epochs"), 1u);  // a swap of neighbours is one edit
  EXPECT_EQ(edit_distance("", "lr"), 2u);
  EXPECT_EQ(nearest_names("epoch", options), std::vector<std::string>{"epochs"});
  EXPECT_EQ(nearest_names("batchsize", options), std::vector<std::string>{"batch-size"});
  EXPECT_EQ(nearest_names("verbos", options), std::vector<std::string>{"verbose"});
  EXPECT_EQ(nearest_names("lr-sched", options), std::vector<std::string>{"lr-schedule"});
  EXPECT_EQ(nearest_names("sed", options), std::vector<std::string>{"seed"});
  // Nothing near: no hint rather than a wild one; a known name is not "near" itself.
  EXPECT_TRUE(nearest_names("bogus", options).empty());
  EXPECT_TRUE(nearest_names("x", options).empty());
  EXPECT_TRUE(nearest_names("seed", {"seed"}).empty());
}

TEST(Strings, SplitJoinTrim) {
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(split("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(join({"x", "y", "z"}, ", "), "x, y, z");
  EXPECT_EQ(trim("  \t hi there \n"), "hi there");
  EXPECT_TRUE(starts_with("mbkit-dataset", "mbkit"));
  EXPECT_TRUE(ends_with("file.h5", ".h5"));
  EXPECT_FALSE(ends_with("h5", "file.h5"));
}

TEST(Strings, HumanUnits) {
  EXPECT_EQ(human_bytes(999), "999 B");
  EXPECT_EQ(human_bytes(26421880), "26.4 MB");
  EXPECT_EQ(human_duration(2.25), "2.2 s");
  EXPECT_EQ(human_duration(200), "3 min 20 s");
  EXPECT_EQ(human_duration(7500), "2 h 05 min");
}

TEST(Strings, TimeUnitsChosenFromTheLongestTime) {
  EXPECT_EQ(choose_time_unit(0.4).name, "ms");
  EXPECT_EQ(choose_time_unit(1).name, "s");
  EXPECT_EQ(choose_time_unit(119).name, "s");
  EXPECT_EQ(choose_time_unit(120).name, "min");
  EXPECT_DOUBLE_EQ(choose_time_unit(600).seconds, 60.0);
  EXPECT_EQ(choose_time_unit(7199).name, "min");
  EXPECT_EQ(choose_time_unit(7200).name, "h");
  EXPECT_DOUBLE_EQ(choose_time_unit(36000).seconds, 3600.0);
}

TEST(Strings, ShortDurations) {
  EXPECT_EQ(short_duration(0.000474), "0.474 ms");
  EXPECT_EQ(short_duration(0.0712), "71.2 ms");
  EXPECT_EQ(short_duration(95), "95 s");
  EXPECT_EQ(short_duration(600), "10 min");
}

TEST(Strings, ShortestDecimalReadsBackExactly) {
  EXPECT_EQ(shortest_decimal(0.9), "0.9");
  EXPECT_EQ(shortest_decimal(1e-10), "1e-10");
  EXPECT_EQ(shortest_decimal(1.0000001), "1.0000001");
  EXPECT_EQ(shortest_decimal(0.1f), "0.10000000149011612");  // a float widened: all its digits
  for (const double value : {1.0 / 3.0, 6.02214076e23, -2.5e-300}) {
    EXPECT_EQ(std::strtod(shortest_decimal(value).c_str(), nullptr), value);
  }
}

TEST(Strings, ShellQuoteRoundTripsThroughTheShellRules) {
  EXPECT_EQ(shell_quote("plain-arg_1.h5"), "plain-arg_1.h5");
  EXPECT_EQ(shell_quote("two words"), "'two words'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(Strings, ParseNumbersNameTheFlag) {
  EXPECT_EQ(parse_int(" 42 ", "--n"), 42);
  EXPECT_DOUBLE_EQ(parse_double("2.5e-3", "--lr"), 2.5e-3);
  EXPECT_MBKIT_ERROR(parse_int("4x", "--shape"), ExitCode::kUsage,
                     "--shape: '4x' is not an integer");
  EXPECT_MBKIT_ERROR(parse_double("nan", "--lr"), ExitCode::kUsage, "--lr");
}

TEST(Json, NestedDocumentAndEscaping) {
  std::ostringstream out;
  {
    JsonWriter json(out, false);
    json.begin_object();
    json.key("name").value("a \"quoted\"\\path\n\x01");
    json.key("n").value(std::int64_t{-3});
    json.key("list").begin_array().value(1).value(2.5).value(true).null().end_array();
    json.key("empty").begin_object().end_object();
    json.key("nan").value(std::nan(""));
    json.end_object();
  }
  EXPECT_EQ(out.str(),
            "{\"name\":\"a \\\"quoted\\\"\\\\path\\n\\u0001\",\"n\":-3,\"list\":[1,2.5,true,null],"
            "\"empty\":{},\"nan\":null}");
}

TEST(Json, DoublesRoundTrip) {
  std::ostringstream out;
  JsonWriter(out, false).value(0.1 + 0.2);
  EXPECT_EQ(std::stod(out.str()), 0.1 + 0.2);
}

}  // namespace
}  // namespace mbkit
