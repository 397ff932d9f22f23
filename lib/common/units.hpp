// SPDX-License-Identifier: Apache-2.0
// Byte sizes in text: "64G", "512M", "4096". Suffixes are powers of 1024.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tutti {

std::optional<uint64_t> parse_size(std::string_view text);
std::optional<uint64_t> parse_uint(std::string_view text);
std::string format_bytes(uint64_t bytes);

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
constexpr bool is_aligned(uint64_t v, uint64_t a) { return v % a == 0; }

}  // namespace tutti
