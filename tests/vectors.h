// SPDX-License-Identifier: Apache-2.0
// Reader of the golden-vector files in tests/vectors/ (written by generate.py), shared
// by the CPU tests and, later, the CUDA tests.
#ifndef NORMKIT_TESTS_VECTORS_H_
#define NORMKIT_TESTS_VECTORS_H_

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace normkit_test {

struct VectorCase {
  std::string name, op;
  std::map<std::string, std::string> scalars;         // key -> rest of the line
  std::map<std::string, std::vector<double>> arrays;  // key -> values

  bool Has(const std::string& key) const { return arrays.count(key) != 0; }
  double Scalar(const std::string& key) const { return std::stod(scalars.at(key)); }
  std::vector<int64_t> Shape() const {
    std::istringstream in(scalars.at("shape"));
    std::vector<int64_t> s;
    for (int64_t d; in >> d;) s.push_back(d);
    return s;
  }
  std::vector<float> Floats(const std::string& key) const {
    const auto& a = arrays.at(key);
    return std::vector<float>(a.begin(), a.end());
  }
  // An optional array (gamma, beta, mask): empty when the case has none.
  std::vector<float> FloatsOrEmpty(const std::string& key) const {
    return Has(key) ? Floats(key) : std::vector<float>();
  }
};

// The data of an optional array, or NULL when it is empty.
inline const float* DataOrNull(const std::vector<float>& v) {
  return v.empty() ? nullptr : v.data();
}

// Parses `path`; an empty result means the file could not be read.
inline std::vector<VectorCase> ReadVectorFile(const std::string& path) {
  std::ifstream in(path);
  std::vector<VectorCase> cases;
  std::string line;
  VectorCase current;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "case") {
      current = VectorCase();
      ls >> current.name;
    } else if (key == "op") {
      ls >> current.op;
    } else if (key == "end") {
      cases.push_back(current);
    } else {
      std::string rest;
      std::getline(ls, rest);
      std::istringstream rs(rest);
      int64_t count = 0;
      // Arrays are "key count v0 v1 ..." with count + 1 tokens; scalars are shorter.
      std::vector<std::string> tokens;
      for (std::string t; rs >> t;) tokens.push_back(t);
      if (tokens.size() >= 2 &&
          (count = std::stoll(tokens[0])) + 1 == static_cast<int64_t>(tokens.size()) &&
          key != "shape") {
        std::vector<double> values;
        for (size_t i = 1; i < tokens.size(); ++i) values.push_back(std::stod(tokens[i]));
        current.arrays[key] = values;
      } else {
        current.scalars[key] = rest;
      }
    }
  }
  return cases;
}

}  // namespace normkit_test

#endif  // NORMKIT_TESTS_VECTORS_H_
