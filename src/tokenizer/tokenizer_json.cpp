#include "tokenizer/tokenizer_json.h"

#include "core/error.h"

namespace sluice::tok {

namespace {

using json = nlohmann::json;

// nlohmann's own DOM builder for every event, except inside the object at root.model.vocab.
class Handler {
public:
    explicit Handler(TokenizerJson& out) : out_(out), dom_(out.root, true) {}

    bool null() { return in_vocab_ ? add(json(nullptr)) : dom_.null(); }
    bool boolean(bool b) { return in_vocab_ ? add(json(b)) : dom_.boolean(b); }
    bool number_integer(json::number_integer_t v) { return in_vocab_ ? add(json(v)) : dom_.number_integer(v); }
    bool number_unsigned(json::number_unsigned_t v) { return in_vocab_ ? add(json(v)) : dom_.number_unsigned(v); }
    bool number_float(json::number_float_t v, const std::string& s) {
        return in_vocab_ ? add(json(v)) : dom_.number_float(v, s);
    }
    bool string(std::string& s) { return in_vocab_ ? add(json(s)) : dom_.string(s); }
    bool binary(json::binary_t& b) { return in_vocab_ ? add(json(nullptr)) : dom_.binary(b); }

    bool start_object(std::size_t n) {
        if (in_vocab_) return open_nested();
        if (keys_.size() == 2 && keys_[0] == "model" && keys_[1] == "vocab") {
            // the DOM gets an empty object here; the entries go to out_.vocab (the last "vocab" key wins, as in a DOM)
            in_vocab_ = true;
            out_.vocab_split = true;
            out_.vocab.clear();
            return dom_.start_object(0) && dom_.end_object();
        }
        keys_.emplace_back();
        return dom_.start_object(n);
    }
    bool key(std::string& k) {
        if (in_vocab_) {
            if (nested_ == 0) key_ = k;
            return true;
        }
        keys_.back() = k;
        return dom_.key(k);
    }
    bool end_object() {
        if (in_vocab_) {
            if (nested_ == 0)
                in_vocab_ = false;
            else
                --nested_;
            return true;
        }
        keys_.pop_back();
        return dom_.end_object();
    }
    bool start_array(std::size_t n) {
        if (in_vocab_) return open_nested();
        keys_.emplace_back(kArray);  // keys come only inside objects: nothing under an array is model.vocab
        return dom_.start_array(n);
    }
    bool end_array() {
        if (in_vocab_) {
            --nested_;
            return true;
        }
        keys_.pop_back();
        return dom_.end_array();
    }
    template <class Exception>
    bool parse_error(std::size_t, const std::string&, const Exception& e) {
        throw e;  // as the DOM parser does: the same message
    }

private:
    static constexpr const char* kArray = "\x01[]";
    bool add(json&& v) {  // a value inside model.vocab: an entry's, or part of a nested one (kept as null)
        if (nested_ == 0) out_.vocab.emplace_back(key_, std::move(v));
        return true;
    }
    bool open_nested() {
        if (nested_ == 0) out_.vocab.emplace_back(key_, json(nullptr));
        ++nested_;
        return true;
    }

    TokenizerJson& out_;
    nlohmann::detail::json_sax_dom_parser<json> dom_;
    std::vector<std::string> keys_;  // the current key of each open container (kArray for arrays)
    bool in_vocab_ = false;
    int nested_ = 0;                 // containers open inside a vocabulary entry's value
    std::string key_;
};

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& origin) {
    TokenizerJson out;
    if (text.empty()) {
        out.root = json::object();
        return out;
    }
    try {
        Handler h(out);
        json::sax_parse(text, &h);
    } catch (const json::exception& e) {
        fail("tokenizer: ", origin, " is not valid JSON: ", e.what());
    }
    SLUICE_CHECK(out.root.is_object(), "tokenizer: ", origin, " is not a JSON object");
    return out;
}

}  // namespace sluice::tok
