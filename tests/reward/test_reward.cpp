// Tests of the verifiers: tables of accepted and rejected answers for math/arithmetic and
// countdown, number normalization, answer extraction order, the format-credit rule, the registry
// and config errors, and adversarial input (garbage, unicode, deep nesting, huge numbers) that
// must score a status within bounded work instead of crashing or recursing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/data/record.h"
#include "unstuck/reward/answer.h"
#include "reward/expression.h"
#include "unstuck/reward/verifier.h"

namespace unstuck::reward {
namespace {

using data::TaskRecord;
using S = RewardStatus;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TaskRecord math_record(const std::string& answer) {
  TaskRecord r;
  r.task = "math";
  r.prompt = "q";
  r.answer = answer;
  return r;
}

TaskRecord countdown_record(std::vector<int64_t> numbers, int64_t target) {
  TaskRecord r;
  r.task = "countdown";
  r.prompt = "q";
  r.answer = "";
  r.fields = {{"numbers", numbers}, {"target", target}};
  return r;
}

struct Case {
  std::string completion;
  S status;
  double reward;
};

void expect_table(const Verifier& verifier, const TaskRecord& record, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const RewardResult r = verifier.score(c.completion, record);
    EXPECT_EQ(config::enum_name(r.status), std::string(config::enum_name(c.status)))
        << "completion: " << c.completion << "  gold: " << record.answer;
    EXPECT_DOUBLE_EQ(r.reward, c.reward) << "completion: " << c.completion;
  }
}

// ---- number normalization ----------------------------------------------------------------------

TEST(NormalizeNumber, AcceptedForms) {
  const std::vector<std::pair<std::string, std::string>> table = {
      {"42", "42"},
      {" 42 ", "42"},
      {"+42", "42"},
      {"042", "42"},
      {"42.0", "42"},
      {"42.", "42"},
      {"42.500", "42.5"},
      {".5", "0.5"},
      {"-0", "0"},
      {"-0.0", "0"},
      {"-7", "-7"},
      {"1,234", "1234"},
      {"1,234,567.80", "1234567.8"},
      {"$42$", "42"},
      {"$ 1,000 $", "1000"},
      {"$$-3$$", "-3"},
      {"1/2", "0.5"},
      {"2/4", "0.5"},
      {"6/3", "2"},
      {"-3/4", "-0.75"},
      {"1/3", "1/3"},
      {"2/6", "1/3"},
      {"0/5", "0"},
      {"\\frac{1}{2}", "0.5"},
      {"-\\dfrac{10}{4}", "-2.5"},
      {"1/1024", "0.0009765625"},
      {"123456789012345678901234567890", "123456789012345678901234567890"},
  };
  for (const auto& [in, out] : table) {
    const auto got = normalize_number(in);
    ASSERT_TRUE(got.has_value()) << in;
    EXPECT_EQ(*got, out) << in;
  }
}

TEST(NormalizeNumber, RejectedForms) {
  for (const std::string in : {"",
                               " ",
                               "$",
                               "abc",
                               "4 2",
                               "1,2345",
                               "12,34",
                               ",123",
                               "1,,234",
                               "1.2.3",
                               "--5",
                               "+-5",
                               "1e3",
                               "0x10",
                               "1/0",
                               "1/",
                               "/2",
                               "1/2/3",
                               "five",
                               "42%",
                               "\xef\xbc\x94\xef\xbc\x92",
                               "\\frac{1}{0}",
                               "\\frac{1}2",
                               "inf",
                               "nan",
                               "4\xe2\x80\x8b"
                               "2"}) {
    EXPECT_FALSE(normalize_number(in).has_value()) << in << " -> " << *normalize_number(in);
  }
}

// ---- extraction --------------------------------------------------------------------------------

TEST(ExtractAnswer, FormatsAndOrder) {
  EXPECT_EQ(*extract_answer("x <answer> 7 </answer> y", AnswerFormat::answer_tag), "7");
  EXPECT_EQ(*extract_answer("<answer>1</answer><answer>2</answer>", AnswerFormat::answer_tag), "2");
  EXPECT_EQ(*extract_answer("\\boxed{\\frac{1}{2}} end", AnswerFormat::boxed), "\\frac{1}{2}");
  EXPECT_EQ(*extract_answer("work\n#### 1,234\nmore", AnswerFormat::hashes), "1,234");
  EXPECT_FALSE(extract_answer("<answer>7", AnswerFormat::answer_tag).has_value());
  EXPECT_FALSE(extract_answer("</answer>7<answer>", AnswerFormat::answer_tag).has_value());
  EXPECT_FALSE(extract_answer("<answer> \n </answer>", AnswerFormat::answer_tag).has_value());
  EXPECT_FALSE(extract_answer("\\boxed{7", AnswerFormat::boxed).has_value());
  const std::string both = "\\boxed{5} and <answer>6</answer>";
  EXPECT_EQ(*extract_answer(both, {AnswerFormat::answer_tag, AnswerFormat::boxed}), "6");
  EXPECT_EQ(*extract_answer(both, {AnswerFormat::boxed, AnswerFormat::answer_tag}), "5");
  EXPECT_EQ(*extract_answer("\\boxed{5}", {AnswerFormat::answer_tag, AnswerFormat::boxed}), "5");
}

// ---- math / arithmetic -------------------------------------------------------------------------

TEST(MathVerifier, AcceptedAndRejectedAnswers) {
  const auto v = make_verifier("math", RewardConfig{});
  expect_table(*v, math_record("1234"),
               {
                   {"<answer>1234</answer>", S::correct, 1.0},
                   {"<answer> 1,234 </answer>", S::correct, 1.0},
                   {"<answer>$1234$</answer>", S::correct, 1.0},
                   {"<answer>+1234</answer>", S::correct, 1.0},
                   {"<answer>1234.0</answer>", S::correct, 1.0},
                   {"<answer>01234</answer>", S::correct, 1.0},
                   {"<answer>2468/2</answer>", S::correct, 1.0},
                   {"<answer>\\frac{2468}{2}</answer>", S::correct, 1.0},
                   {"The sum is \\boxed{1234}.", S::correct, 1.0},
                   {"so\n#### 1,234", S::correct, 1.0},
                   {"<answer>1</answer> no wait <answer>1234</answer>", S::correct, 1.0},
                   {"<answer>1235</answer>", S::wrong, 0.1},
                   {"<answer>-1234</answer>", S::wrong, 0.1},
                   {"<answer>123.4</answer>", S::wrong, 0.1},
                   {"\\boxed{1235}", S::wrong, 0.0},
                   {"1234", S::no_answer, 0.0},
                   {"<answer></answer>", S::no_answer, 0.0},
                   {"<answer>1234", S::no_answer, 0.0},
                   {"<answer>12 34</answer>", S::no_answer, 0.1},
                   {"<answer>12,34</answer>", S::wrong, 0.1},  // a list of two numbers
                   {"<answer>1e3</answer>", S::wrong, 0.1},    // 1000
                   {"<answer>the answer is 1234</answer>", S::correct, 1.0},
                   {"<answer>\xef\xbc\x91\xef\xbc\x92\xef\xbc\x93\xef\xbc\x94</answer>", S::correct, 1.0},
                   {"\\boxed{1234", S::no_answer, 0.0},
               });
  expect_table(*v, math_record("0.5"),
               {
                   {"<answer>1/2</answer>", S::correct, 1.0},
                   {"<answer>.50</answer>", S::correct, 1.0},
                   {"\\boxed{\\frac{1}{2}}", S::correct, 1.0},
                   {"<answer>0.51</answer>", S::wrong, 0.1},
                   {"<answer>1/0</answer>", S::no_answer, 0.1},
               });
  expect_table(*v, math_record("1/3"),
               {
                   {"<answer>2/6</answer>", S::correct, 1.0},
                   {"<answer>0.333</answer>", S::wrong, 0.1},
               });
  // Expressions compare by value (the number verifier of arithmetic compares them as text).
  expect_table(*v, math_record("x+1"),
               {
                   {"<answer> x+1 </answer>", S::correct, 1.0},
                   {"<answer>1+x</answer>", S::correct, 1.0},
                   {"<answer>x-1</answer>", S::wrong, 0.1},
               });
}

// Inside brackets a comma separates items: "[0,100]" is an interval and "(1,500)" a pair, never the
// numbers 100 or 1500 (a false positive is the worst error a reward can make).
TEST(MathVerifier, CommasInsideBracketsAreNeverThousandsSeparators) {
  const auto v = make_verifier("math", RewardConfig{});
  expect_table(*v, math_record("100"),
               {
                   {"\\boxed{[0,100]}", S::wrong, 0.0},
                   {"\\boxed{(0,100)}", S::wrong, 0.0},
                   {"\\boxed{\\{0,100\\}}", S::wrong, 0.0},
                   {"\\boxed{100}", S::correct, 1.0},
               });
  expect_table(*v, math_record("1500"),
               {
                   {"\\boxed{(1,500)}", S::wrong, 0.0},
                   {"\\boxed{[1,500]}", S::wrong, 0.0},
                   {"\\boxed{1,500}", S::correct, 1.0},
               });
  expect_table(*v, math_record("(1,500)"),
               {
                   {"\\boxed{(1, 500)}", S::correct, 1.0},
                   {"\\boxed{(1,500)}", S::correct, 1.0},
                   {"\\boxed{1500}", S::wrong, 0.0},
                   {"\\boxed{(1500)}", S::wrong, 0.0},
               });
  expect_table(*v, math_record("[0,100]"),
               {
                   {"\\boxed{[0, 100]}", S::correct, 1.0},
                   {"\\boxed{100}", S::wrong, 0.0},
               });
}

// reward.answer_formats last_expression: free text is read as math-verify reads it ("final
// answer is X", "answer: X", else the expression ending last), and a policy cannot score by
// mentioning the gold answer on the way to another one.
RewardConfig free_text_config() {
  RewardConfig config;
  config.answer_formats = {"answer_tag", "boxed", "hashes", "last_expression"};
  return config;
}

TEST(FreeText, ReadsTheAnswerTheSentenceGives) {
  const auto v = make_verifier("math", free_text_config());
  expect_table(*v, math_record("22"),
               {
                   {"Adding 15 and 7 gives 22.", S::correct, 1.0},
                   {"So the total is **22** apples", S::correct, 1.0},
                   {"Therefore $x = 22$.", S::correct, 1.0},
                   {"\\[ 44/2 \\]", S::correct, 1.0},
                   {"The final answer is 22. I hope it is correct; it took 3 steps.", S::correct, 1.0},
                   {"Answer: 22 (from step 2 of 4)", S::correct, 1.0},
                   {"answer: 15 + 7 = 22", S::correct, 1.0},
                   {"Answer: 3 apples cost = 22 (2 boxes)", S::correct, 1.0},
                   {"The answer is 22 because 5 + 17 is 22, not 23.", S::correct, 1.0},
                   {"It costs $22.", S::correct, 1.0},
                   {"\\boxed{22} and then 23", S::correct, 1.0},  // a box comes first in the list
                   // The gold answer on the way to another one is not the answer.
                   {"A first guess is 22, but correcting the sign gives 23.", S::wrong, 0.0},
                   {"I considered $22$ and rejected it: 23", S::wrong, 0.0},
                   {"The final answer is 23. I hope it is correct. 22", S::wrong, 0.0},
                   {"Answer: 23 (not 22)", S::wrong, 0.0},
                   {"22 = 23", S::wrong, 0.0},
                   {"x22", S::no_answer, 0.0},  // not a whole word
                   {"no numbers here", S::no_answer, 0.0},
               });
  // Numbers never merge across brackets or a leading zero: "[0,100]" and "0,100" are not 100.
  expect_table(*v, math_record("100"),
               {
                   {"The interval is [0,100] here.", S::wrong, 0.0},
                   {"It is 0,100.", S::wrong, 0.0},
                   {"We get (1,500).", S::no_answer, 0.0},  // no whole-word number
                   {"There are 100 of them.", S::correct, 1.0},
               });
  expect_table(*v, math_record("1500"),
               {
                   {"So there are 1,500 apples.", S::correct, 1.0},
                   {"We get (1,500).", S::no_answer, 0.0},
                   {"We get 1,500 (2 ways).", S::correct, 1.0},
               });
  expect_table(*v, math_record("\\frac{1}{2}"),
               {
                   {"The probability is $\\frac{2}{4}$.", S::correct, 1.0},
                   {"The probability is 0.5 in 3 of 4 runs", S::wrong, 0.0},  // the last is 4
                   {"Final Answer: The final answer is $\\frac12$. I hope it is correct.", S::correct, 1.0},
               });
  // An expression that does not read as math is passed over for the next one.
  expect_table(*v, math_record("7"), {{"We get $7$ and $\\frac{$", S::correct, 1.0}});
}

TEST(FreeText, WithoutTheFormatNothingOutsideABoxTagOrHashesIsRead) {
  const auto v = make_verifier("math", RewardConfig{});
  expect_table(*v, math_record("22"), {{"Adding 15 and 7 gives 22.", S::no_answer, 0.0}});
  EXPECT_EQ(parse_answer_formats({"last_expression"}, "k"), std::vector<AnswerFormat>{AnswerFormat::last_expression});
  // The number verifier and countdown read the same expression.
  TaskRecord arithmetic = math_record("22");
  arithmetic.task = "arithmetic";
  EXPECT_EQ(make_verifier("arithmetic", free_text_config())->score("so it is 22.", arithmetic).status, S::correct);
  EXPECT_EQ(
      make_verifier("countdown", free_text_config())->score("We try 3 * 5 + 7", countdown_record({3, 5, 7}, 22)).status,
      S::correct);
}

TEST(FreeText, AnswersComeInMathVerifysOrder) {
  EXPECT_EQ(free_text_answers("The final answer is $5$. Then 6 and 7."), (std::vector<std::string>{"5", "7", "6"}));
  // "12 (2" is an arithmetic expression to math-verify too; it does not parse, so 12 is read.
  EXPECT_EQ(free_text_answers("Answer: 3 apples cost = 12 (2 boxes)"), (std::vector<std::string>{"12 (2", "12", "3"}));
  EXPECT_EQ(free_text_answers("total $$x^2$$ then \\(y\\) and 1 + 2."),
            (std::vector<std::string>{"1 + 2", "2", "1", "y", "x^2"}));
  EXPECT_TRUE(free_text_answers("").empty());
  EXPECT_TRUE(free_text_answers("$$ $$ \\( \\) word").empty());
  std::string many;
  for (int i = 0; i < 100; ++i) many += std::to_string(i) + " ";
  EXPECT_EQ(free_text_answers(many).size(), kMaxFreeTextAnswers);
  EXPECT_EQ(free_text_answers(many).front(), "99");
}

TEST(MathVerifier, ArithmeticComparesNumbers) {
  const auto v = make_verifier("arithmetic", RewardConfig{});
  TaskRecord r = math_record("700414");
  r.task = "arithmetic";
  EXPECT_EQ(v->score("<answer>700414</answer>", r).status, S::correct);
  EXPECT_EQ(v->score("<answer>700,414</answer>", r).status, S::correct);
  EXPECT_EQ(v->score("<answer>700413</answer>", r).status, S::wrong);
  EXPECT_EQ(v->score("<answer>1e3</answer>", r).status, S::no_answer);  // numbers only
}

// ---- countdown ---------------------------------------------------------------------------------

TEST(CountdownVerifier, AcceptedAndRejectedAnswers) {
  const auto v = make_verifier("countdown", RewardConfig{});
  expect_table(*v, countdown_record({3, 5, 7}, 22),
               {
                   {"<answer>3*5+7</answer>", S::correct, 1.0},
                   {"<answer>7+5*3</answer>", S::correct, 1.0},
                   {"<answer> ( 3 * 5 ) + 7 </answer>", S::correct, 1.0},
                   {"<answer>((3*5))+7</answer>", S::correct, 1.0},
                   {"<answer>3*5+7=22</answer>", S::correct, 1.0},
                   {"<answer>3*5+7 = 22</answer>", S::correct, 1.0},
                   {"\\boxed{5*3+7}", S::correct, 1.0},
                   {"#### 7+3*5", S::correct, 1.0},
                   {"<answer>3+5+7</answer>", S::wrong, 0.1},
                   {"<answer>(3+5)*7</answer>", S::wrong, 0.1},
                   {"<answer>3*5+7=23</answer>", S::wrong, 0.1},
                   {"<answer>3*5</answer>", S::invalid, 0.1},
                   {"<answer>3*5+7+7</answer>", S::invalid, 0.1},
                   {"<answer>3*5+8-1</answer>", S::invalid, 0.1},
                   {"<answer>22</answer>", S::invalid, 0.1},
                   {"<answer>3*5+07</answer>", S::correct, 1.0},
                   {"3*5+7", S::no_answer, 0.0},
                   {"<answer></answer>", S::no_answer, 0.0},
                   {"<answer>-3+5*5</answer>", S::no_answer, 0.1},
                   {"<answer>3\xc3\x97"
                    "5+7</answer>",
                    S::no_answer, 0.1},
                   {"<answer>3*5+7.0</answer>", S::no_answer, 0.1},
                   {"<answer>3*5+(7</answer>", S::no_answer, 0.1},
                   {"<answer>3*5+7)</answer>", S::no_answer, 0.1},
                   {"<answer>3**5+7</answer>", S::no_answer, 0.1},
                   {"<answer>3 5 7</answer>", S::no_answer, 0.1},
                   {"<answer>()</answer>", S::no_answer, 0.1},
                   {"<answer>3*5+7=</answer>", S::no_answer, 0.1},
                   {"<answer>3*5+7=22=22</answer>", S::no_answer, 0.1},
               });
  // Exact rational arithmetic: 6/(1-3/4) = 24.
  expect_table(*v, countdown_record({1, 3, 4, 6}, 24),
               {
                   {"<answer>6/(1-3/4)</answer>", S::correct, 1.0},
                   {"<answer>6/1-3/4</answer>", S::wrong, 0.1},
               });
  // Division by zero with exactly the given numbers.
  expect_table(*v, countdown_record({3, 3, 7}, 7),
               {
                   {"<answer>7/(3-3)</answer>", S::invalid, 0.1},
                   {"<answer>7+3-3</answer>", S::correct, 1.0},
               });
}

TEST(CountdownVerifier, RecordWithoutNumbersIsAUserError) {
  const auto v = make_verifier("countdown", RewardConfig{});
  const std::string message = error_of([&] { v->score("<answer>1</answer>", math_record("1")); });
  EXPECT_NE(message.find("a countdown record needs \"numbers\" (a list of integers) and \"target\""), std::string::npos)
      << message;
}

// ---- format credit, registry, config -----------------------------------------------------------

TEST(FormatCredit, CombinesWithCorrectness) {
  RewardConfig config;
  config.format_reward = 0.2;
  const auto v = make_verifier("math", config);
  const TaskRecord r = math_record("42");
  EXPECT_DOUBLE_EQ(v->score("<answer>42</answer>", r).reward, 1.0);  // not 1.2
  EXPECT_DOUBLE_EQ(v->score("\\boxed{42}", r).reward, 1.0);
  EXPECT_DOUBLE_EQ(v->score("<answer>41</answer>", r).reward, 0.2);
  EXPECT_DOUBLE_EQ(v->score("\\boxed{41}", r).reward, 0.0);
  EXPECT_DOUBLE_EQ(v->score("41", r).reward, 0.0);
  config.format_reward = 0.0;
  EXPECT_DOUBLE_EQ(make_verifier("math", config)->score("<answer>41</answer>", r).reward, 0.0);
  // Correctness-only verifiers and the rule itself.
  EXPECT_DOUBLE_EQ(make_math_verifier(config)->score("<answer>41</answer>", r).reward, 0.0);
  config.format_reward = 0.1;
  EXPECT_DOUBLE_EQ(with_format_credit({0.0, S::wrong}, "<answer>x</answer>", config).reward, 0.1);
  EXPECT_EQ(with_format_credit({0.0, S::wrong}, "<answer>x</answer>", config).status, S::wrong);
}

TEST(FormatCredit, DefaultStaysWellBelowHalf) { EXPECT_LE(RewardConfig{}.format_reward, 0.25); }

TEST(Registry, KnownNamesAndErrors) {
  EXPECT_EQ(verifier_names(), (std::vector<std::string>{"math", "arithmetic", "countdown", "code"}));
  EXPECT_EQ(error_of([] { make_verifier("chess", RewardConfig{}); }),
            "unknown verifier 'chess' (known: math, arithmetic, countdown, code)");
  RewardConfig c;
  c.format_reward = 1.5;
  EXPECT_EQ(error_of([&] { make_verifier("math", c); }),
            "reward.format_reward must be in [0, 1) (a correct answer earns 1), got 1.5");
  c = RewardConfig{};
  c.answer_formats = {"answer_tag", "latex"};
  EXPECT_EQ(error_of([&] { make_verifier("math", c); }),
            "reward.answer_formats: unknown answer format 'latex' (known: answer_tag, boxed, hashes, last_expression)");
  c.answer_formats = {"boxed"};
  const auto boxed_only = make_verifier("math", c);
  EXPECT_EQ(boxed_only->score("<answer>42</answer>", math_record("42")).status, S::no_answer);
  EXPECT_EQ(boxed_only->score("\\boxed{42}", math_record("42")).status, S::correct);
}

// ---- adversarial input -------------------------------------------------------------------------

TEST(Expression, StatusesAndExactValues) {
  const auto r = evaluate_expression("(3+5)*7-2");
  EXPECT_EQ(r.status, ExprStatus::ok);
  EXPECT_EQ(r.value.num, 54);
  EXPECT_EQ(r.literals, (std::vector<int64_t>{3, 5, 7, 2}));
  const auto third = evaluate_expression("1/3");
  EXPECT_EQ(third.value.num, 1);
  EXPECT_EQ(third.value.den, 3);
  EXPECT_EQ(evaluate_expression("   ").status, ExprStatus::empty);
  EXPECT_EQ(evaluate_expression("7/(2-2)").status, ExprStatus::division_by_zero);
  EXPECT_EQ(evaluate_expression("7/(2-2)+").status, ExprStatus::syntax_error);  // syntax first
  EXPECT_EQ(evaluate_expression("1000000000*1000000000*1000000000").status, ExprStatus::overflow);
  EXPECT_EQ(evaluate_expression("9223372036854775807").status, ExprStatus::overflow);
  EXPECT_EQ(evaluate_expression(std::string(100000, '9')).status, ExprStatus::too_long);
  // Denominators that grow past int64 are reported, not wrapped.
  std::string primes = "1/2";
  for (const int p : {3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71}) {
    primes += "+1/" + std::to_string(p);
  }
  EXPECT_EQ(evaluate_expression(primes).status, ExprStatus::overflow);
}

TEST(Expression, DeepNestingStopsAtTheDepthLimitInsteadOfRecursing) {
  ExpressionLimits limits;
  limits.max_chars = 1 << 22;
  limits.max_depth = 32;
  const int depth = 1 << 20;  // would overflow the stack if the parser recursed this deep
  const std::string deep = std::string(depth, '(') + "1" + std::string(depth, ')');
  EXPECT_EQ(evaluate_expression(deep, limits).status, ExprStatus::too_deep);
  const std::string ok = std::string(32, '(') + "1" + std::string(32, ')');
  EXPECT_EQ(evaluate_expression(ok, limits).status, ExprStatus::ok);
  const std::string over = std::string(33, '(') + "1" + std::string(33, ')');
  EXPECT_EQ(evaluate_expression(over, limits).status, ExprStatus::too_deep);

  // Through the verifier, with the length limit raised so that the depth limit is what acts.
  RewardConfig config;
  config.max_answer_chars = 1 << 20;
  const auto v = make_verifier("countdown", config);
  const std::string nested = std::string(200000, '(') + "3*5+7" + std::string(200000, ')');
  EXPECT_EQ(v->score("<answer>" + nested + "</answer>", countdown_record({3, 5, 7}, 22)).status, S::no_answer);
}

// 4 KB inputs of the kinds a sampling model or an attacker produces.
std::vector<std::string> adversarial_inputs() {
  std::vector<std::string> inputs;
  std::mt19937_64 rng(12345);
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  inputs.push_back(bytes);
  inputs.push_back("<answer>" + bytes + "</answer>");
  const std::string alphabet = "0123456789+-*/() =<>\\{}#$.,";
  std::string soup(4096, ' ');
  for (char& c : soup) c = alphabet[rng() % alphabet.size()];
  inputs.push_back("<answer>" + soup + "</answer>");
  inputs.push_back("<answer>" + soup.substr(0, 200) + "</answer>");
  inputs.push_back("<answer>" + std::string(2040, '(') + "3*5+7" + std::string(2040, ')') + "</answer>");
  inputs.push_back("<answer>" + std::string(4080, '9') + "</answer>");
  std::string chain = "3";
  while (chain.size() < 4080) chain += "*999999999";
  inputs.push_back("<answer>" + chain + "</answer>");
  std::string tags;
  while (tags.size() < 4096) tags += "<answer>";
  inputs.push_back(tags + "</answer>");
  std::string boxes;
  while (boxes.size() < 4096) boxes += "\\boxed{";
  inputs.push_back(boxes);
  inputs.push_back(std::string(4096, '#'));
  std::string unicode;
  while (unicode.size() < 4096) unicode += "\xe2\x88\x9a\xf0\x9f\x98\x80\xef\xbc\x93\xc3\x97";
  inputs.push_back("<answer>" + unicode + "</answer>");
  inputs.push_back("<answer>" + std::string(4096, '\0') + "</answer>");
  return inputs;
}

TEST(Adversarial, GarbageNeverThrowsAndScoresAStatus) {
  const RewardConfig config;
  const TaskRecord cd = countdown_record({3, 5, 7}, 22);
  const TaskRecord math = math_record("22");
  const auto countdown = make_verifier("countdown", config);
  const auto math_v = make_verifier("math", config);
  for (const std::string& input : adversarial_inputs()) {
    RewardResult a;
    RewardResult b;
    ASSERT_NO_THROW(a = countdown->score(input, cd)) << input.substr(0, 60);
    ASSERT_NO_THROW(b = math_v->score(input, math)) << input.substr(0, 60);
    for (const RewardResult& r : {a, b}) {
      EXPECT_NE(r.status, S::correct) << input.substr(0, 60);
      EXPECT_TRUE(r.reward == 0.0 || r.reward == config.format_reward);
    }
  }
  // Random short expressions: a status for each, and correct only when the value is right.
  std::mt19937_64 rng(7);
  const std::string alphabet = "3577+-*/()  =2";
  for (int i = 0; i < 20000; ++i) {
    std::string e(rng() % 24, ' ');
    for (char& c : e) c = alphabet[rng() % alphabet.size()];
    const RewardResult r = countdown->score("<answer>" + e + "</answer>", cd);
    if (r.status == S::correct) {
      const auto value = evaluate_expression(e.substr(0, e.find('=')));
      EXPECT_TRUE(value.value.num == 22 && value.value.den == 1) << e;
    }
  }
}

// Free text is read in linear time: 256 KB inputs built to defeat a naive scan (unclosed
// environments, anchors without answers, long digit and operator runs) each score in well under
// 250 ms (measured 8-34 ms on an AMD EPYC core; a scan quadratic in the length takes minutes).
TEST(Adversarial, FreeTextOfAQuarterMegabyteScoresInLinearTime) {
  const auto math = make_verifier("math", free_text_config());
  const TaskRecord m = math_record("22");
  const size_t size = 256 * 1024;
  auto repeated = [&](const std::string& unit) {
    std::string s;
    while (s.size() < size) s += unit;
    return s;
  };
  const std::vector<std::string> inputs = {
      repeated("\\("),       repeated("\\["),           repeated("$$ "),        repeated(" [a"),    repeated("answer "),
      repeated("answer: ="), repeated("final answer "), repeated("1 "),         repeated("1,000 "), repeated("1+"),
      repeated("-(1"),       repeated("= 1 "),          repeated("\\frac{1}{"), repeated("$1"),     repeated("**1** "),
  };
  for (const std::string& input : inputs) {
    const auto start = std::chrono::steady_clock::now();
    ASSERT_NO_THROW(math->score(input, m)) << input.substr(0, 20);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 0.25) << input.substr(0, 20) << ": " << seconds << " s";
  }
}

// The bound on work: every adversarial 4 KB input is answered well under 1 ms. Expected cost is a
// few microseconds (one linear scan, a length check); the 1 ms bound leaves a 100x margin so the
// test is not flaky on a loaded machine.
TEST(Adversarial, FourKilobyteInputsScoreInUnderAMillisecondEach) {
  const auto countdown = make_verifier("countdown", RewardConfig{});
  const auto math = make_verifier("math", RewardConfig{});
  const TaskRecord cd = countdown_record({3, 5, 7}, 22);
  const TaskRecord m = math_record("22");
  const auto inputs = adversarial_inputs();
  const int rounds = 100;
  const auto start = std::chrono::steady_clock::now();
  int64_t calls = 0;
  for (int round = 0; round < rounds; ++round) {
    for (const std::string& input : inputs) {
      countdown->score(input, cd);
      math->score(input, m);
      calls += 2;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds / static_cast<double>(calls), 1e-3) << calls << " calls in " << seconds << " s";
}

}  // namespace
}  // namespace unstuck::reward
