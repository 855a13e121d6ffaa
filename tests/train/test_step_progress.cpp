// Progress inside a GRPO step (train/step_progress.h): silent for the quiet time, then at most one
// line per interval, each naming the step, the phase and where it is (the rollout's tokens and
// rows, the update's chunk and optimizer pass).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

#include "train/step_progress.h"

namespace unstuck::train {
namespace {

// spdlog's default logger replaced by one writing to `out` for the test's life.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
    logger->set_pattern("%v");
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST(StepProgress, NamesThePhaseAndWhereItIsOnceDue) {
  CapturedLog log;
  StepProgress progress(/*quiet_s=*/0.0, /*every_s=*/0.0);
  progress.start_step(7);
  rollout::GenerateProgress p;
  p.tokens_done = 3;
  p.max_tokens = 64;
  p.rows = 8;
  p.finished = 2;
  p.sampled = 21;
  progress.rollout(p);
  progress.chunk("update", 2, 5, 1, 2);
  progress.chunk("measure", 1, 3);
  progress.optimizer(2, 2);
  const std::string text = log.text();
  EXPECT_NE(text.find("  step 7: rollout 3/64 tokens, 2/8 rows finished, 21 tokens sampled"), std::string::npos)
      << text;
  EXPECT_NE(text.find("  step 7: update chunk 2/5 of optimizer pass 1/2, "), std::string::npos) << text;
  EXPECT_NE(text.find("  step 7: measure chunk 1/3, "), std::string::npos) << text;
  EXPECT_NE(text.find("  step 7: optimizer step 2/2, "), std::string::npos) << text;
}

TEST(StepProgress, AShortStepPrintsNothingAndLinesAreRateLimited) {
  CapturedLog log;
  {
    StepProgress quiet(/*quiet_s=*/60.0, /*every_s=*/0.0);  // a step shorter than the quiet time
    quiet.start_step(1);
    quiet.chunk("update", 1, 1);
    quiet.optimizer(1, 1);
  }
  EXPECT_EQ(log.text(), "");
  StepProgress limited(/*quiet_s=*/0.0, /*every_s=*/60.0);
  limited.start_step(2);
  for (int i = 1; i <= 5; ++i) limited.chunk("update", i, 5);
  const std::string text = log.text();
  EXPECT_NE(text.find("update chunk 1/5"), std::string::npos) << text;
  EXPECT_EQ(text.find("update chunk 2/5"), std::string::npos) << text;  // within the interval
  // A new step starts its own quiet time and interval.
  limited.start_step(3);
  limited.chunk("update", 1, 1);
  EXPECT_NE(log.text().find("  step 3: update chunk 1/1"), std::string::npos) << log.text();
}

}  // namespace
}  // namespace unstuck::train
