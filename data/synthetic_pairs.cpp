#include "data/synthetic_pairs.h"

#include <cctype>
#include <set>
#include <vector>

#include "autograd/error.h"
#include "autograd/generator.h"

namespace ag::data {

namespace {

struct Noun {
  const char* singular;
  const char* plural;
};
// 60 nouns, animate ones first (the subjects of verbs are drawn among them).
constexpr int kAnimate = 34;
const Noun kNouns[] = {{"dog", "dogs"}, {"cat", "cats"}, {"bird", "birds"}, {"horse", "horses"},
    {"cow", "cows"}, {"fish", "fishes"}, {"mouse", "mice"}, {"child", "children"}, {"man", "men"},
    {"woman", "women"}, {"boy", "boys"}, {"girl", "girls"}, {"king", "kings"}, {"queen", "queens"},
    {"farmer", "farmers"}, {"teacher", "teachers"}, {"doctor", "doctors"}, {"student", "students"},
    {"friend", "friends"}, {"baby", "babies"}, {"wolf", "wolves"}, {"fox", "foxes"},
    {"lion", "lions"}, {"tiger", "tigers"}, {"bear", "bears"}, {"rabbit", "rabbits"},
    {"frog", "frogs"}, {"duck", "ducks"}, {"goat", "goats"}, {"pig", "pigs"}, {"monkey", "monkeys"},
    {"baker", "bakers"}, {"soldier", "soldiers"}, {"singer", "singers"},
    // objects
    {"apple", "apples"}, {"ball", "balls"}, {"book", "books"}, {"car", "cars"}, {"house", "houses"},
    {"tree", "trees"}, {"door", "doors"}, {"window", "windows"}, {"cake", "cakes"},
    {"letter", "letters"}, {"song", "songs"}, {"river", "rivers"}, {"boat", "boats"},
    {"stone", "stones"}, {"flower", "flowers"}, {"cup", "cups"}, {"table", "tables"},
    {"chair", "chairs"}, {"key", "keys"}, {"box", "boxes"}, {"bottle", "bottles"}, {"hat", "hats"},
    {"shoe", "shoes"}, {"egg", "eggs"}, {"picture", "pictures"}, {"garden", "gardens"}};
const char* const kAdjectives[] = {"big", "small", "old", "young", "red", "green", "blue", "black",
    "white", "happy", "sad", "quiet", "loud", "fast", "slow", "good", "bad", "new", "little",
    "tall", "short", "heavy", "light", "warm", "cold", "clean", "dirty", "strange", "pretty",
    "hungry"};
struct Verb {
  const char* singular;  // he sees
  const char* plural;    // they see
};
const Verb kTransitive[] = {{"sees", "see"}, {"likes", "like"}, {"finds", "find"},
    {"takes", "take"}, {"wants", "want"}, {"helps", "help"}, {"follows", "follow"},
    {"paints", "paint"}, {"loves", "love"}, {"hates", "hate"}, {"watches", "watch"},
    {"carries", "carry"}, {"needs", "need"}, {"buys", "buy"}, {"holds", "hold"}, {"calls", "call"},
    {"breaks", "break"}, {"opens", "open"}, {"pushes", "push"}, {"brings", "bring"}};
const Verb kIntransitive[] = {{"sleeps", "sleep"}, {"runs", "run"}, {"sings", "sing"},
    {"laughs", "laugh"}, {"waits", "wait"}, {"swims", "swim"}, {"jumps", "jump"},
    {"dances", "dance"}, {"cries", "cry"}, {"works", "work"}};
const char* const kAdverbs[] = {"quickly", "slowly", "often", "today", "again", "quietly",
    "happily", "here", "there", "now", "always", "sometimes"};

// One Lingo stem per English word, made of consonant–vowel syllables by a fixed generator (the
// same lexicon for every seed): nouns CVCVC (a consonant last, for the plural suffixes), the
// others CVCVC too, adverbs CVCVCV. No two word forms of the lexicon are the same.
struct Lexicon {
  std::vector<std::string> nouns, adjectives, transitive, intransitive, adverbs;
  std::vector<bool> feminine;  // per noun
};

const Lexicon& lexicon() {
  static const Lexicon lex = [] {
    Generator g(0x11760);
    const std::string consonants = "bdfgklmnprstvz", vowels = "aeiou";
    std::set<std::string> used = {"lo", "la", "li", "le", "un", "una", "unos", "unas"};
    auto letter = [&](const std::string& from) {
      return from[static_cast<std::size_t>(g.randint(0, static_cast<int64_t>(from.size())))];
    };
    // A fresh stem whose every form (stem + each suffix) is new.
    auto stem = [&](bool final_vowel, const std::vector<std::string>& suffixes) {
      for (;;) {
        std::string s{letter(consonants), letter(vowels), letter(consonants), letter(vowels),
            letter(consonants)};
        if (final_vowel) s += letter(vowels);
        bool fresh = true;
        for (const std::string& suffix : suffixes) fresh = fresh && !used.count(s + suffix);
        if (!fresh) continue;
        for (const std::string& suffix : suffixes) used.insert(s + suffix);
        return s;
      }
    };
    Lexicon l;
    for (std::size_t i = 0; i < std::size(kNouns); ++i) {
      l.feminine.push_back(g.randint(0, 2) == 1);
      l.nouns.push_back(stem(false, {"", l.feminine.back() ? "en" : "i"}));
    }
    for (std::size_t i = 0; i < std::size(kAdjectives); ++i)
      l.adjectives.push_back(stem(false, {"o", "a", "os", "as"}));
    for (std::size_t i = 0; i < std::size(kTransitive); ++i)
      l.transitive.push_back(stem(false, {"e", "en"}));
    for (std::size_t i = 0; i < std::size(kIntransitive); ++i)
      l.intransitive.push_back(stem(false, {"e", "en"}));
    for (std::size_t i = 0; i < std::size(kAdverbs); ++i) l.adverbs.push_back(stem(true, {""}));
    return l;
  }();
  return lex;
}

// The words of a noun phrase on both sides.
struct Phrase {
  std::vector<std::string> english, lingo;
  bool plural = false;
};

Phrase noun_phrase(Generator& g, int64_t noun_count) {
  const Lexicon& lex = lexicon();
  const int64_t noun = g.randint(0, noun_count);
  const bool plural = g.randint(0, 2) == 1;
  const bool feminine = lex.feminine[static_cast<std::size_t>(noun)];
  const int64_t adjective =
      g.randint(0, 10) < 4 ? g.randint(0, static_cast<int64_t>(std::size(kAdjectives))) : -1;
  // The determiner: 0 the, 1 a/an (singular) or some (plural), 2 none (plural only).
  const int64_t roll = g.randint(0, 10);
  const int determiner = !plural ? (roll < 5 ? 0 : 1) : (roll < 4 ? 0 : roll < 7 ? 1 : 2);
  Phrase p;
  p.plural = plural;
  const int form = (plural ? 2 : 0) + (feminine ? 1 : 0);  // masc sg, fem sg, masc pl, fem pl
  const std::string english_noun = plural ? kNouns[noun].plural : kNouns[noun].singular;
  const std::string first_english_word =
      adjective >= 0 ? std::string(kAdjectives[adjective]) : english_noun;
  if (determiner == 0) {
    p.english.push_back("the");
    p.lingo.push_back(std::vector<std::string>{"lo", "la", "li", "le"}[form]);
  } else if (determiner == 1) {
    const bool vowel = std::string("aeiou").find(first_english_word[0]) != std::string::npos;
    p.english.push_back(plural ? "some" : vowel ? "an" : "a");
    p.lingo.push_back(std::vector<std::string>{"un", "una", "unos", "unas"}[form]);
  }
  if (adjective >= 0) p.english.push_back(kAdjectives[adjective]);
  p.english.push_back(english_noun);
  const std::string& noun_stem = lex.nouns[static_cast<std::size_t>(noun)];
  p.lingo.push_back(plural ? noun_stem + (feminine ? "en" : "i") : noun_stem);
  if (adjective >= 0)
    p.lingo.push_back(lex.adjectives[static_cast<std::size_t>(adjective)] +
                      std::vector<std::string>{"o", "a", "os", "as"}[form]);
  return p;
}

// "the big dog sees a cat ." -> "The big dog sees a cat." (fra.txt's look).
std::string sentence_text(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) {
    if (word == ".")
      text += ".";
    else
      text += (text.empty() ? "" : " ") + word;
  }
  text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
  return text;
}

}  // namespace

std::string synthetic_pairs_text(int64_t count, uint64_t seed) {
  constexpr int64_t kMaxCount = 1000000;
  if (count < 1 || count > kMaxCount)
    fail<ValueError>(
        "synthetic_pairs_text: count ", count, " is outside 1 to ", kMaxCount, " pairs");
  const Lexicon& lex = lexicon();
  Generator g(seed);
  std::set<std::string> seen;
  std::string out;
  while (static_cast<int64_t>(seen.size()) < count) {
    const Phrase subject = noun_phrase(g, kAnimate);
    const bool transitive = g.randint(0, 10) < 7;
    std::vector<std::string> english = subject.english, lingo = subject.lingo;
    const int64_t verb = g.randint(
        0, static_cast<int64_t>(transitive ? std::size(kTransitive) : std::size(kIntransitive)));
    const Verb& v = transitive ? kTransitive[verb] : kIntransitive[verb];
    english.push_back(subject.plural ? v.plural : v.singular);
    if (transitive) {
      const Phrase object = noun_phrase(g, static_cast<int64_t>(std::size(kNouns)));
      english.insert(english.end(), object.english.begin(), object.english.end());
      lingo.insert(lingo.end(), object.lingo.begin(), object.lingo.end());
    }
    if (g.randint(0, 10) < 3) {
      const std::size_t adverb =
          static_cast<std::size_t>(g.randint(0, static_cast<int64_t>(std::size(kAdverbs))));
      english.push_back(kAdverbs[adverb]);
      lingo.push_back(lex.adverbs[adverb]);
    }
    const std::string& verb_stem =
        (transitive ? lex.transitive : lex.intransitive)[static_cast<std::size_t>(verb)];
    lingo.push_back(verb_stem + (subject.plural ? "en" : "e"));  // the verb last, agreeing
    english.push_back(".");
    lingo.push_back(".");
    const std::string source = sentence_text(english);
    if (!seen.insert(source).second) continue;  // distinct sources: a held-out slice is unseen
    out += source + "\t" + sentence_text(lingo) + "\n";
  }
  return out;
}

}  // namespace ag::data
