#include "tools/json_value.h"

#include <cctype>

namespace uroce::tools {
namespace {

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  StatusOr<JsonValue> Document() {
    JsonValue v;
    if (!Value(&v, 0)) return InvalidArgument("bad JSON at offset " + std::to_string(i_));
    Skip();
    if (i_ != s_.size()) return InvalidArgument("trailing bytes after JSON at offset " + std::to_string(i_));
    return v;
  }

 private:
  void Skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Eat(char c) {
    Skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Word(const char* w) {
    const std::string word(w);
    if (s_.compare(i_, word.size(), word) != 0) return false;
    i_ += word.size();
    return true;
  }
  bool String(std::string* out) {
    if (!Eat('"')) return false;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\') {
        if (i_ >= s_.size()) return false;
        c = s_[i_++];
        switch (c) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'r': c = '\r'; break;
          case 'b': c = '\b'; break;
          case 'f': c = '\f'; break;
          case 'u': {
            if (i_ + 4 > s_.size()) return false;
            const unsigned cp = static_cast<unsigned>(std::stoul(s_.substr(i_, 4), nullptr, 16));
            i_ += 4;
            c = cp < 0x80 ? static_cast<char>(cp) : '?';  // telemetry sends ASCII
            break;
          }
          default: break;  // \" \\ \/
        }
      }
      out->push_back(c);
    }
    return Eat('"');
  }
  bool Value(JsonValue* v, int depth) {
    if (depth > 32) return false;
    Skip();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      v->kind = JsonValue::Kind::kObject;
      if (Eat('}')) return true;
      do {
        std::string key;
        JsonValue member;
        if (!String(&key) || !Eat(':') || !Value(&member, depth + 1)) return false;
        v->members.emplace_back(std::move(key), std::move(member));
      } while (Eat(','));
      return Eat('}');
    }
    if (c == '[') {
      ++i_;
      v->kind = JsonValue::Kind::kArray;
      if (Eat(']')) return true;
      do {
        JsonValue item;
        if (!Value(&item, depth + 1)) return false;
        v->items.push_back(std::move(item));
      } while (Eat(','));
      return Eat(']');
    }
    if (c == '"') {
      v->kind = JsonValue::Kind::kString;
      return String(&v->text);
    }
    if (Word("true")) return v->kind = JsonValue::Kind::kBool, v->boolean = true, true;
    if (Word("false")) return v->kind = JsonValue::Kind::kBool, true;
    if (Word("null")) return true;
    const size_t start = i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' || s_[i_] == '+' ||
                              s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
    }
    if (i_ == start) return false;
    v->kind = JsonValue::Kind::kNumber;
    v->text = s_.substr(start, i_ - start);
    return true;
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

const JsonValue* JsonValue::Get(const std::string& key) const {
  for (const auto& [k, v] : members) {
    if (k == key) return &v;
  }
  return nullptr;
}

StatusOr<JsonValue> ParseJson(const std::string& text) { return Parser(text).Document(); }

}  // namespace uroce::tools
