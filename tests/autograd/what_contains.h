// WhatContains: a Catch2 matcher for CHECK_THROWS_MATCHES that checks both the exception's type
// (the macro does) and that its message contains every given piece:
//   CHECK_THROWS_MATCHES(f(), ag::AutogradError, WhatContains({"register_hook", "[2,3]"}));
#pragma once

#include <catch2/catch.hpp>

#include <exception>
#include <string>
#include <vector>

class WhatContains : public Catch::MatcherBase<std::exception> {
 public:
  explicit WhatContains(std::vector<std::string> parts) : parts_(std::move(parts)) {}
  bool match(const std::exception& e) const override {
    const std::string what = e.what();
    for (const std::string& part : parts_)
      if (what.find(part) == std::string::npos) return false;
    return true;
  }
  std::string describe() const override {
    std::string out = "has a message containing";
    for (const std::string& part : parts_) out += " \"" + part + "\"";
    return out;
  }

 private:
  std::vector<std::string> parts_;
};
