#include "json.hpp"

#include <cmath>
#include <cstdio>

namespace fa_cli {

std::string json_quote(const std::string& s) {
  std::string q = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': q += "\\\""; break;
      case '\\': q += "\\\\"; break;
      case '\n': q += "\\n"; break;
      case '\t': q += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          q += buf;
        } else {
          q += static_cast<char>(c);
        }
    }
  }
  return q + "\"";
}

void Json::start(const char* key) {
  if (!first_.empty()) {
    if (!first_.back()) out_ += ", ";
    first_.back() = false;
  }
  if (key) out_ += json_quote(key) + ": ";
}

Json& Json::begin_object(const char* key) {
  start(key);
  out_ += "{";
  first_.push_back(true);
  return *this;
}

Json& Json::end_object() {
  out_ += "}";
  first_.pop_back();
  return *this;
}

Json& Json::begin_array(const char* key) {
  start(key);
  out_ += "[";
  first_.push_back(true);
  return *this;
}

Json& Json::end_array() {
  out_ += "]";
  first_.pop_back();
  return *this;
}

Json& Json::field(const char* key, const std::string& v) {
  start(key);
  out_ += json_quote(v);
  return *this;
}

Json& Json::field(const char* key, double v) {
  start(key);
  if (!std::isfinite(v)) {
    out_ += "null";
  } else if (v == std::floor(v) && std::fabs(v) < 0x1p53) {
    char buf[32];  // integral values (counts of FLOPs, pairs) exactly
    std::snprintf(buf, sizeof buf, "%.0f", v);
    out_ += buf;
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    out_ += buf;
  }
  return *this;
}

Json& Json::field(const char* key, int64_t v) {
  start(key);
  out_ += std::to_string(v);
  return *this;
}

Json& Json::field(const char* key, bool v) {
  start(key);
  out_ += v ? "true" : "false";
  return *this;
}

Json& Json::null_field(const char* key) {
  start(key);
  out_ += "null";
  return *this;
}

Json& Json::value(double v) { return field(nullptr, v); }

}  // namespace fa_cli
