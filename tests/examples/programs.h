// The paths of the programs ag_examples_tests runs (tests/examples/CMakeLists.txt defines them).
#pragma once
#include <string>

inline const std::string train = AG_TRAIN_PATH;
inline const std::string predict = AG_PREDICT_PATH;
inline const std::string generate = AG_GENERATE_PATH;
