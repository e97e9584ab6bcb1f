// Internal: one JSON value read a byte at a time, as a model writes a call's arguments, copied
// out in its compact form (whitespace outside strings dropped, everything else as written) as
// soon as each byte is known to belong to it. A stream's argument fragments are the pieces of
// that copy, so their concatenation is the same whatever the pieces were.
//
// Bytes are held back (not yet in the copy) only where a later byte could still make the value
// invalid or change what was meant: a key until its colon and the start of its value, a comma
// until what follows it, a number or true/false/null until it ends, a string escape until it is
// complete. The copy is therefore always a prefix of a valid JSON text that `closing()` ends
// with only quotes and brackets: a call cut off by max_tokens still has JSON arguments, and no
// value the model did not write.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace lynx::chatparse::detail {

class JsonStream {
 public:
  enum class Status {
    kMore,   // the value goes on
    kDone,   // the value ended; the byte was consumed
    kEnded,  // the value ended before this byte, which is not consumed (after a bare number)
    kError,  // the byte cannot continue the value (or nesting passed the bound)
  };
  // Bound on nested arrays/objects, as parse_json's.
  static constexpr int kMaxDepth = 64;

  Status feed(char c);
  // The end of the text: a number or literal at the top level ends here.
  Status end_of_text();
  // The compact copy made so far; take() returns and forgets what was not taken yet.
  const std::string& copy() const { return copy_; }
  std::string take();
  // What ends the copy as valid JSON: closes an open string and the open containers.
  std::string closing() const;
  bool started() const { return !copy_.empty() || !pending_.empty(); }
  char first() const { return first_; }  // the value's first byte (0 before it)

 private:
  enum class State {
    kValue,       // a value is expected (an array's first may be ']')
    kKeyOrClose,  // after '{': a key or '}'
    kKey,         // after ',' in an object: a key
    kKeyString,   // inside a key
    kColon,       // after a key
    kAfterValue,  // ',' or the container's close
    kString,      // inside a string value
    kNumber,      // inside a number
    kLiteral,     // inside true/false/null
    kDone,
    kError,
  };
  Status value_ended();
  Status number_byte(char c);
  Status string_byte(char c, std::string& to);

  State state_ = State::kValue;
  bool array_first_ = false;  // kValue right after '[' (']' allowed)
  std::vector<char> stack_;   // open containers, '{' or '['
  std::string copy_;          // the compact copy
  size_t taken_ = 0;          // copy_[0, taken_) was returned by take()
  std::string pending_;       // held bytes: ",", a key and its colon, a number, a literal
  std::string escape_;        // an unfinished escape inside a string
  std::string_view literal_;  // the literal being matched
  int num_ = 0;               // number state (json_stream.cc), or bytes of the literal
  char first_ = 0;
};

}  // namespace lynx::chatparse::detail
