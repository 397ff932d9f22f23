// SPDX-License-Identifier: Apache-2.0
// The shared tier's values: a value is trusted only under the key it was written for and with
// the bytes it was written with; everything else has a status that makes it a miss.
#include <gtest/gtest.h>

#include <string>

#include "remote/redis_cluster.hpp"
#include "remote/value.hpp"

namespace tutti::remote {
namespace {

Shape llama() { return Shape{32, 8, 128, 2, 256, false}; }

std::string make_value(const ValueId& id, size_t payload_bytes, unsigned seed) {
  std::string v(kValueHeaderBytes + payload_bytes, '\0');
  for (size_t i = 0; i < payload_bytes; ++i) v[kValueHeaderBytes + i] = static_cast<char>((i * 2654435761u + seed) >> 7);
  encode_value_header(id, payload_bytes, payload_sum(v.data() + kValueHeaderBytes, payload_bytes),
                      reinterpret_cast<uint8_t*>(v.data()));
  return v;
}

TEST(RemoteValue, FingerprintsTellShapesApart) {
  const Shape a = llama();
  EXPECT_EQ(shape_fingerprint(a), shape_fingerprint(llama()));
  for (auto change : {+[](Shape& s) { s.layers++; }, +[](Shape& s) { s.heads++; }, +[](Shape& s) { s.head_dim++; },
                      +[](Shape& s) { s.elem_bytes++; }, +[](Shape& s) { s.chunk_tokens++; },
                      +[](Shape& s) { s.k_only = true; }}) {
    Shape b = a;
    change(b);
    EXPECT_NE(shape_fingerprint(a), shape_fingerprint(b));
  }
}

TEST(RemoteValue, EveryLayerOfAChunkSharesOneSlot) {
  ValueId id{Key{0x1122334455667788ull, 0x99aabbccddeeff00ull}, shape_fingerprint(llama()), 0};
  const std::string k0 = value_key(id);
  // tutti:{<16 hex: shape>:<32 hex: chunk key, high half first>}:<layer>
  ASSERT_EQ(k0.size(), 59u);
  EXPECT_EQ(k0.substr(0, 7), "tutti:{");
  EXPECT_EQ(k0.substr(23, 33), ":99aabbccddeeff001122334455667788");
  EXPECT_EQ(k0.substr(56), "}:0");
  for (uint32_t l = 1; l < 32; ++l) {
    id.layer = l;
    EXPECT_EQ(key_slot(value_key(id)), key_slot(k0));
  }
  ValueId other = id;
  other.chunk.lo ^= 1;
  EXPECT_NE(value_key(other), value_key(id));
}

TEST(RemoteValue, RoundTripsAndRefusesAnythingElse) {
  const ValueId id{Key{7, 8}, shape_fingerprint(llama()), 5};
  const size_t bytes = 3 * 4096;
  const std::string v = make_value(id, bytes, 1);
  EXPECT_EQ(check_value(v, id, bytes), ValueStatus::kOk);

  // Under another chunk's, shape's or layer's key: foreign.
  for (ValueId other : {ValueId{Key{7, 9}, id.shape, 5}, ValueId{Key{8, 8}, id.shape, 5}, ValueId{id.chunk, id.shape + 1, 5},
                        ValueId{id.chunk, id.shape, 6}})
    EXPECT_EQ(check_value(v, other, bytes), ValueStatus::kForeign);
  EXPECT_EQ(check_value(v, id, bytes - 4096), ValueStatus::kForeign);  // another size of chunk-layer

  // Truncated, padded, or no header at all.
  EXPECT_EQ(check_value(v.substr(0, v.size() - 1), id, bytes), ValueStatus::kBadLength);
  EXPECT_EQ(check_value(v + "x", id, bytes), ValueStatus::kBadLength);
  EXPECT_EQ(check_value(v.substr(0, 10), id, bytes), ValueStatus::kBadLength);
  EXPECT_EQ(check_value(std::string(bytes + kValueHeaderBytes, 'z'), id, bytes), ValueStatus::kNotOurs);

  // One bit flipped anywhere: in the header it fails the header's sum, in the payload its own.
  for (size_t at : {size_t{12}, size_t{20}, size_t{40}, size_t{48}, size_t{56}, kValueHeaderBytes,
                    kValueHeaderBytes + 4095, kValueHeaderBytes + 4096, v.size() - 1}) {
    std::string bad = v;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    const ValueStatus want = at < kValueHeaderBytes ? ValueStatus::kBadHeader : ValueStatus::kBadChecksum;
    EXPECT_EQ(check_value(bad, id, bytes), want) << "byte " << at;
  }
  // Payloads that are not whole pages are summed too.
  const std::string odd = make_value(id, 1000, 2);
  EXPECT_EQ(check_value(odd, id, 1000), ValueStatus::kOk);
  std::string odd_bad = odd;
  odd_bad.back() ^= 1;
  EXPECT_EQ(check_value(odd_bad, id, 1000), ValueStatus::kBadChecksum);
}

}  // namespace
}  // namespace tutti::remote
