// The check macros report the failing call and the library's own message, in one line.
#include <curl/curl.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <oneapi/dnnl/dnnl.h>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/check.hpp"
#include "test_helpers.hpp"

namespace mbkit {
namespace {

TEST(Check, ConditionWithMessage) {
  const int shards = 0;
  EXPECT_MBKIT_ERROR(MBKIT_CHECK(shards > 0, "need at least one shard, got ", shards),
                     ExitCode::kFailure, "need at least one shard, got 0");
}

TEST(Check, SysCallNamesTheObjectAndErrno) {
  EXPECT_MBKIT_ERROR(MBKIT_SYS_CHECK(::open("/nonexistent/x", O_RDONLY), "/nonexistent/x"),
                     ExitCode::kFailure, "/nonexistent/x: No such file or directory");
  EXPECT_EQ(MBKIT_SYS_CHECK(::open("/dev/null", O_RDONLY), "/dev/null") >= 0, true);
}

TEST(Check, Hdf5CallCarriesTheLibraryMessage) {
  io::quiet_hdf5_errors();
  try {
    MBKIT_H5_CHECK(H5Fopen("/nonexistent/file.h5", H5F_ACC_RDONLY, H5P_DEFAULT));
    FAIL() << "H5Fopen of a missing file succeeded";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("H5Fopen failed: "), std::string::npos) << message;
    EXPECT_NE(message.find("unable to open file"), std::string::npos) << message;
    EXPECT_NE(error.where().find("test_check.cpp"), std::string::npos);
  }
}

TEST(Check, OneDnnStatusIsNamed) {
  EXPECT_MBKIT_ERROR(MBKIT_DNNL_CHECK(dnnl_set_verbose(-1)), ExitCode::kFailure,
                     "dnnl_set_verbose failed: invalid arguments");
}

// MPI is initialised (as a singleton) by the one test that needs it and finalised at exit.
class MpiFinalizer : public testing::Environment {
 public:
  void TearDown() override {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Finalize();
  }
};
[[maybe_unused]] testing::Environment* const kMpiFinalizer =
    testing::AddGlobalTestEnvironment(new MpiFinalizer);

TEST(Check, MpiFailureIsACommunicationErrorWithMpisOwnText) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    ASSERT_EQ(MPI_Init(nullptr, nullptr), MPI_SUCCESS);
  }
  EXPECT_MBKIT_ERROR(detail::mpi_check(MPI_ERR_COUNT, "MPI_Send(buffer, -1, ...)", MBKIT_HERE),
                     ExitCode::kCommunication, "MPI_Send failed: MPI_ERR_COUNT: invalid count");
}

TEST(Check, CurlCodeIsNamed) {
  CURL* handle = curl_easy_init();
  ASSERT_NE(handle, nullptr);
  EXPECT_MBKIT_ERROR(
      MBKIT_CURL_CHECK(curl_easy_setopt(handle, static_cast<CURLoption>(999999), 0L)),
      ExitCode::kFailure, "curl_easy_setopt failed: ");
  curl_easy_cleanup(handle);
}

TEST(Check, CallNameStripsArguments) {
  EXPECT_EQ(detail::call_name("H5Dwrite(id, type, H5S_ALL)"), "H5Dwrite");
  EXPECT_EQ(detail::call_name("::open(path.c_str(), O_RDONLY)"), "open");
}

}  // namespace
}  // namespace mbkit
