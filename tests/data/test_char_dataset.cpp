// nanoGPT's character dataset and batches (data/char_dataset.h).
#include <catch2/catch.hpp>

#include "autograd/error.h"
#include "data/char_dataset.h"

using namespace ag;

TEST_CASE("char_dataset: the sorted set of the characters, 90 % train, decode inverts it",
    "[char_dataset]") {
  const std::u32string text = U"héllo wörld, hello\n";  // 19 characters
  const data::CharDataset d = data::char_dataset(text);
  CHECK(d.itos == U"\n ,dehlorwéö");  // sorted by code point
  CHECK(d.characters == 19);
  CHECK(d.train.size() == 17);  // int(19 · 0.9)
  CHECK(d.val.size() == 2);
  std::vector<int64_t> all = d.train;
  all.insert(all.end(), d.val.begin(), d.val.end());
  CHECK(data::decode(d, all) == "héllo wörld, hello\n");
  CHECK_THROWS_AS(data::decode(d, {12}), ValueError);
  CHECK_THROWS_AS(data::char_dataset(text, 1.0), ValueError);
}

TEST_CASE("get_batch: windows and their next characters, offsets from the seeded stream",
    "[char_dataset]") {
  std::vector<int64_t> ids(50);
  for (int64_t i = 0; i < 50; ++i) ids[static_cast<std::size_t>(i)] = i;
  data::BatchStream stream(7), again(7);
  const data::WindowBatch batch = data::get_batch(ids, 3, 8, stream);
  REQUIRE(batch.x.shape() == Shape{3, 8});
  const std::vector<int64_t> x = batch.x.to_vector<int64_t>(), y = batch.y.to_vector<int64_t>();
  for (int64_t b = 0; b < 3; ++b) {
    const auto start = static_cast<int64_t>(again.next() % (50 - 8));  // the same draw
    for (int64_t t = 0; t < 8; ++t) {
      CHECK(x[static_cast<std::size_t>(b * 8 + t)] == start + t);
      CHECK(y[static_cast<std::size_t>(b * 8 + t)] == start + t + 1);  // the next character
    }
  }
  CHECK(stream.state() == again.state());
  // A split without a window of block_size + 1 characters: an error, not a division by zero.
  CHECK_THROWS_AS(data::get_batch(std::vector<int64_t>(8, 0), 1, 8, stream), ShapeError);
  CHECK_THROWS_AS(data::get_batch(ids, 0, 8, stream), ValueError);
}

TEST_CASE("check_windows: a split without a window of block_size + 1 characters is named",
    "[char_dataset]") {
  const data::CharDataset d = data::char_dataset(std::u32string(40, U'a'));  // 36 train, 4 val
  CHECK_NOTHROW(data::check_windows(d, 3));  // every split has a window of 3 and its next one
  CHECK_THROWS_WITH(data::check_windows(d, 4),
      "the text is too short: its val split has 4 characters, and a window of block_size 4 needs "
      "5");
  CHECK_THROWS_WITH(data::check_windows(d, 36), Catch::Contains("its train split has 36"));
  CHECK_THROWS_AS(data::check_windows(d, 36), ShapeError);
}
