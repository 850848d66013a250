// A minimal JSON writer for the --json report: objects, arrays, strings, numbers (non-finite
// numbers become null), booleans. Keys are written in the order given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fa_cli {

class Json {
 public:
  Json& begin_object(const char* key = nullptr);
  Json& end_object();
  Json& begin_array(const char* key = nullptr);
  Json& end_array();
  Json& field(const char* key, const std::string& v);
  Json& field(const char* key, const char* v) { return field(key, std::string(v)); }
  Json& field(const char* key, double v);
  Json& field(const char* key, int64_t v);
  Json& field(const char* key, int v) { return field(key, static_cast<int64_t>(v)); }
  Json& field(const char* key, bool v);
  Json& null_field(const char* key);
  Json& value(double v);  // an array element
  const std::string& str() const { return out_; }

 private:
  void start(const char* key);  // comma and key, as the position needs
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written into it yet
};

std::string json_quote(const std::string& s);

}  // namespace fa_cli
