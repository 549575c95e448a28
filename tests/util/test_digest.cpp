// SHA-256 and MD5 against the published test vectors (FIPS 180-2 appendix B, RFC 1321 A.5).
#include <gtest/gtest.h>

#include "mbkit/util/digest.hpp"
#include "test_helpers.hpp"

namespace mbkit {
namespace {

std::span<const std::uint8_t> bytes(const std::string& text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha256_hex(bytes("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(bytes("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(bytes(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, StreamingEqualsOneShotAtEveryBlockBoundary) {
  std::string text;
  for (int i = 0; i < 300; ++i) text.push_back(static_cast<char>('a' + i % 26));
  const std::string expected = sha256_hex(bytes(text));
  for (std::size_t cut : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 128u, 299u}) {
    Sha256 sha;
    sha.update(text.data(), cut);
    sha.update(text.data() + cut, text.size() - cut);
    EXPECT_EQ(sha.hex(), expected) << "split at " << cut;
  }
}

TEST(Md5, Rfc1321Vectors) {
  EXPECT_EQ(md5_hex(bytes("")), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5_hex(bytes("a")), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(md5_hex(bytes("abc")), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(md5_hex(bytes("message digest")), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(md5_hex(bytes("abcdefghijklmnopqrstuvwxyz")), "c3fcd3d76192e4007dfb496cca67e13b");
  EXPECT_EQ(md5_hex(bytes("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")),
            "d174ab98d277d9f5a5611c2c9f419d9f");
  EXPECT_EQ(md5_hex(bytes("1234567890123456789012345678901234567890123456789012345678901234567890"
                          "1234567890")),
            "57edf4a22be3c955ac49da2e2107b67a");
}

TEST(DigestFile, BothDigestsAndSizeInOnePass) {
  test::TempDir dir;
  const std::string text(200000, 'x');
  test::write_text(dir.file("blob"), text);
  const auto digests = digest_file(dir.file("blob"));
  EXPECT_EQ(digests.size, text.size());
  EXPECT_EQ(digests.sha256, sha256_hex(bytes(text)));
  EXPECT_EQ(digests.md5, md5_hex(bytes(text)));
}

TEST(DigestFile, MissingFileIsADataErrorNamingIt) {
  EXPECT_MBKIT_ERROR(digest_file("/nonexistent/blob"), ExitCode::kBadData, "/nonexistent/blob");
}

}  // namespace
}  // namespace mbkit
