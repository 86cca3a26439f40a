// A parallel corpus that ag generates itself: English sentences and their translations into a
// small invented language ("Lingo"), for ag-train --task translate where d2l's fra-eng file cannot
// be downloaded. The rules reorder words and make them agree, so that the attention of a
// translator has something to learn beyond word-for-word copying.
//
// English:  S V O [Adv] .        the big dog sees a cat .           dogs sleep quietly .
// Lingo:    S O [Adv] V .        lo ... ... una ... ... .           ... ... ... .
//
// The grammar (one sentence):
//   sentence     = NP(subject) verb [NP(object)] [adverb] "."     (70 % with an object)
//   NP           = [determiner] [adjective] noun                   (an adjective 40 % of the time)
//   number       each NP singular or plural (50 %); the verb agrees with the subject's number
//   determiners  singular: the | a/an (50 % each); plural: the | some | none (40/30/30 %)
//   adverb       30 % of the sentences
// Lingo, word by word (every word of English has one Lingo stem; Lingo's word order differs):
//   word order   subject, object, adverb, verb (SOV); in an NP: determiner, noun, adjective
//   gender       every noun is masculine or feminine (fixed per noun, not visible in English)
//   nouns        singular: the stem; plural: stem + "i" (masculine), stem + "en" (feminine)
//   articles     the: lo / la / li / le (masc. sg., fem. sg., masc. pl., fem. pl.);
//                a/an: un / una (sg.); some: unos / unas (pl.); no English article: none
//   adjectives   stem + "o" / "a" / "os" / "as" by the noun's gender and number
//   verbs        stem + "e" (singular subject) / "en" (plural subject)
//   adverbs      invariant
// Sentences hold 3 to 9 words counting the final "." (both sides the same number: Lingo only
// moves words). English has some 230 word forms, Lingo some 320; the Lingo stems are made up of
// syllables by a fixed generator, the same for every seed, so every corpus shares one lexicon.
//
// Written in d2l's fra.txt format — "Source sentence.<TAB>Target sentence." a line, the first
// letter upper case and the full stop against the last word, as in fra.txt ("Go.\tVa !") — so it
// goes through the same reader (read_pairs) and preprocessing (preprocess_nmt) as d2l's file.
#pragma once

#include <cstdint>
#include <string>

namespace ag::data {

// `count` pairs of distinct English sentences, deterministic for `seed`, one pair a line in
// fra.txt format (each line ends in '\n'). ValueError for a count outside 1 to 1,000,000.
std::string synthetic_pairs_text(int64_t count, uint64_t seed = 0);

}  // namespace ag::data
