// Normalizers, pre-tokenizers and decoders of tokenizer.json (see hf_components.h). Each class
// reproduces the `tokenizers` component of the same name; the comments say where its behaviour is
// not what one would guess.
#include "tokenizer/hf_components.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <unordered_map>

#include "tokenizer/hf_regex.h"
#include "tokenizer/unicode_text.h"
#include "unstuck/common/error.h"

namespace unstuck::tokenizer {
namespace {

using nlohmann::json;

// The split regex GPT-2 uses (ByteLevel with use_regex).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string type_of(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    throw UserError(where + ": expected an object with a \"type\"");
  }
  return j["type"].get<std::string>();
}

[[noreturn]] void refuse(const std::string& kind, const std::string& type, const std::string& where) {
  throw UserError(where + ": " + kind + " type '" + type +
                  "' is not supported (docs/TOKENIZER.md lists the supported components)");
}

// A "pattern" object: {"String": "..."} or {"Regex": "..."}.
Regex pattern_regex(const json& j, const std::string& where) {
  if (j.is_object() && j.contains("String")) {
    return Regex(regex_escape(j["String"].get<std::string>()), where);
  }
  if (j.is_object() && j.contains("Regex")) return Regex(j["Regex"].get<std::string>(), where);
  throw UserError(where + ": expected {\"String\": ...} or {\"Regex\": ...}, got " + j.dump());
}

std::string replace_all(std::string_view text, const Regex& pattern, const std::string& content) {
  std::vector<std::pair<size_t, size_t>> matches;
  pattern.find_all(text, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    out.append(text.substr(prev, b - prev));
    out += content;
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

// ---- normalizers ------------------------------------------------------------------------------

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = unicode::normalize(text, form_); }

 private:
  unicode::NormalForm form_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);  // `tokenizers` leaves empty text empty
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = replace_all(text, pattern_, content_); }

 private:
  Regex pattern_;
  std::string content_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

// ---- pre-tokenizers ---------------------------------------------------------------------------

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

Behavior parse_behavior(const json& j, const std::string& where) {
  static const std::unordered_map<std::string, Behavior> names{{"Removed", Behavior::removed},
                                                               {"Isolated", Behavior::isolated},
                                                               {"MergedWithPrevious", Behavior::merged_with_previous},
                                                               {"MergedWithNext", Behavior::merged_with_next},
                                                               {"Contiguous", Behavior::contiguous}};
  const auto it = names.find(j.is_string() ? j.get<std::string>() : "");
  if (it == names.end()) throw UserError(where + ": unknown split behavior " + j.dump());
  return it->second;
}

// Splits `piece` given the spans that matched (`tokenizers`' NormalizedString::split): each span of
// the text is a match or not, and `behavior` says how matches join their neighbours.
void split_by_matches(const PreToken& piece, const std::vector<std::pair<size_t, size_t>>& matches, Behavior behavior,
                      bool invert, std::vector<PreToken>& out) {
  struct Span {
    size_t begin, end;
    bool match;
  };
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != piece.text.size()) spans.push_back({prev, piece.text.size(), invert});

  std::vector<Span> kept;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::isolated:
      kept = spans;
      break;
    case Behavior::removed:
      for (const Span& s : spans) {
        if (!s.match) kept.push_back(s);
      }
      break;
    case Behavior::merged_with_previous:
      for (const Span& s : spans) {
        if (s.match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back(s);
        }
        previous_match = s.match;
      }
      break;
    case Behavior::merged_with_next:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back(*it);
        }
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case Behavior::contiguous:
      for (size_t i = 0; i < spans.size(); ++i) {
        if (i > 0 && spans[i].match == previous_match) {
          kept.back().end = spans[i].end;
        } else {
          kept.push_back(spans[i]);
        }
        previous_match = spans[i].match;
      }
      break;
  }
  for (const Span& s : kept) {
    if (s.end > s.begin) {
      out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
    }
  }
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    std::vector<std::pair<size_t, size_t>> matches;
    for (const PreToken& p : pieces) {
      pattern_.find_all(p.text, matches);
      split_by_matches(p, matches, behavior_, invert_, out);
    }
    pieces = std::move(out);
  }

 private:
  Regex pattern_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, where);
  }
  void split(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    std::vector<std::pair<size_t, size_t>> matches;
    for (PreToken& p : pieces) {
      // Per piece, as `tokenizers` does: every chunk between added tokens gets its own space.
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      if (regex_) {
        regex_->find_all(p.text, matches);
        split_by_matches(p, matches, Behavior::isolated, false, out);
      } else if (!p.text.empty()) {
        out.push_back(std::move(p));
      }
    }
    for (PreToken& p : out) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (const char c : p.text) mapped += byte_to_unicode(static_cast<unsigned char>(c));
      p.text = std::move(mapped);
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { always, never, first };

PrependScheme parse_prepend_scheme(const json& j, const std::string& where) {
  if (j.contains("prepend_scheme")) {
    const auto s = j["prepend_scheme"].get<std::string>();
    if (s == "always") return PrependScheme::always;
    if (s == "never") return PrependScheme::never;
    if (s == "first") return PrependScheme::first;
    throw UserError(where + ".prepend_scheme: expected always, never or first, got '" + s + "'");
  }
  // Files written before prepend_scheme existed say add_prefix_space.
  return j.value("add_prefix_space", true) ? PrependScheme::always : PrependScheme::never;
}

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split, const std::string& where)
      : replacement_(std::move(replacement)),
        scheme_(scheme),
        split_(split),
        space_(regex_escape(" "), where),
        marker_(regex_escape(replacement_), where) {}
  void split(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    std::vector<std::pair<size_t, size_t>> matches;
    for (PreToken& p : pieces) {
      p.text = replace_all(p.text, space_, replacement_);
      const bool starts = p.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::always || (scheme_ == PrependScheme::first && p.at_start))) {
        p.text.insert(0, replacement_);
      }
      if (split_) {
        marker_.find_all(p.text, matches);
        split_by_matches(p, matches, Behavior::merged_with_next, false, out);
      } else if (!p.text.empty()) {
        out.push_back(std::move(p));
      }
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  Regex space_, marker_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void split(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    std::vector<std::pair<size_t, size_t>> matches;
    for (const PreToken& p : pieces) {
      matches.clear();
      for (size_t pos = 0; pos < p.text.size();) {
        size_t len = 0;
        const char32_t cp = unicode::decode_at(p.text, pos, &len);
        if (unicode::is_numeric(cp)) matches.emplace_back(pos, pos + len);
        pos += len;
      }
      split_by_matches(p, matches, individual_ ? Behavior::isolated : Behavior::contiguous, false, out);
    }
    pieces = std::move(out);
  }

 private:
  bool individual_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(std::vector<PreToken>& pieces) const override {
    for (const auto& p : parts_) p->split(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// ---- decoders ---------------------------------------------------------------------------------

class ByteLevelDecoder : public Decoder {
 public:
  ByteLevelDecoder() {
    for (int b = 0; b < 256; ++b) {
      size_t len = 0;
      reverse_[unicode::decode_at(byte_to_unicode(static_cast<unsigned char>(b)), 0, &len)] = static_cast<char>(b);
    }
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      // A token with a character outside the byte map (an added token such as "<|im_start|>"
      // with a space in it) passes through as its own UTF-8 bytes.
      std::string mapped;
      bool all = true;
      for (size_t pos = 0; pos < t.size() && all;) {
        size_t len = 0;
        const auto it = reverse_.find(unicode::decode_at(t, pos, &len));
        if (it == reverse_.end()) {
          all = false;
        } else {
          mapped += it->second;
        }
        pos += len;
      }
      bytes += all ? mapped : t;
    }
    tokens.assign(1, unicode::lossy_utf8(bytes));
  }

 private:
  std::unordered_map<char32_t, char> reverse_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, PrependScheme scheme)
      : replacement_(std::move(replacement)), scheme_(scheme) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          // As `tokenizers` does: in the first token every marker is dropped, not only the
          // leading one (the prefix it added when encoding).
          if (!(i == 0 && scheme_ != PrependScheme::never)) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = replace_all(t, pattern_, content_);
  }

 private:
  Regex pattern_;
  std::string content_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    const auto flush = [&] {
      if (pending.empty()) return;
      if (unicode::invalid_utf8_offset(pending) == std::string::npos) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(t[3]) && std::isxdigit(t[4])) {
        byte = std::stoi(t.substr(3, 2), nullptr, 16);
      }
      if (byte >= 0) {
        pending += static_cast<char>(byte);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const size_t n = content_.size();
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t i = 0; i < start_ && begin + n <= end && t.compare(begin, n, content_) == 0; ++i) begin += n;
      for (size_t i = 0; i < stop_ && end >= begin + n && t.compare(end - n, n, content_) == 0; ++i) end -= n;
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

template <class T, class Make>
std::vector<std::unique_ptr<T>> make_list(const json& j, const char* key, const std::string& where, Make make) {
  if (!j.contains(key) || !j[key].is_array()) throw UserError(where + "." + key + ": expected a list");
  std::vector<std::unique_ptr<T>> parts;
  for (size_t i = 0; i < j[key].size(); ++i) {
    auto part = make(j[key][i], where + "." + key + "[" + std::to_string(i) + "]");
    if (part) parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace

const std::string& byte_to_unicode(unsigned char b) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
      unicode::append_utf8(t[c], printable ? static_cast<char32_t>(c) : static_cast<char32_t>(256 + n++));
    }
    return t;
  }();
  return table[b];
}

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::nfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::nfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::nfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::nfkd);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(j.at("prepend").get<std::string>());
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(pattern_regex(j.at("pattern"), where + ".pattern"),
                                               j.at("content").get<std::string>());
  }
  if (type == "Sequence") {
    return std::make_unique<SequenceNormalizer>(make_list<Normalizer>(j, "normalizers", where, make_normalizer));
  }
  refuse("normalizer", type, where);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where);
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(pattern_regex(j.at("pattern"), where + ".pattern"),
                                               parse_behavior(j.at("behavior"), where + ".behavior"),
                                               j.value("invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(j.value("add_prefix_space", true), j.value("use_regex", true),
                                                   where);
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(j.value("replacement", std::string("\xE2\x96\x81")),
                                                   parse_prepend_scheme(j, where), j.value("split", true), where);
  }
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(j.value("individual_digits", false));
  if (type == "Sequence") {
    return std::make_unique<SequencePreTokenizer>(
        make_list<PreTokenizer>(j, "pretokenizers", where, make_pre_tokenizer));
  }
  refuse("pre_tokenizer", type, where);
}

std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    return std::make_unique<MetaspaceDecoder>(j.value("replacement", std::string("\xE2\x96\x81")),
                                              parse_prepend_scheme(j, where));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(pattern_regex(j.at("pattern"), where + ".pattern"),
                                            j.at("content").get<std::string>());
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(j.at("content").get<std::string>(), j.value("start", 0), j.value("stop", 0));
  }
  if (type == "Sequence") {
    return std::make_unique<SequenceDecoder>(make_list<Decoder>(j, "decoders", where, make_decoder));
  }
  refuse("decoder", type, where);
}

}  // namespace unstuck::tokenizer
