// Every collective of the Gloo communicator at world size 2 (two processes on loopback, started by
// the test) against a single-process reference computed from the ranks' known inputs; the
// single-process communicator; byte accounting; the torchrun environment; the launcher stopping a
// run when a rank fails, and naming it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <vector>

#include "dist/dist_workers.h"
#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"
#include "unstuck/dist/communicator.h"
#include "unstuck/dist/data_parallel.h"
#include "unstuck/dist/launcher.h"

namespace unstuck::dist {
namespace {

// Rank r's input element i: distinct per rank and element, exact in every type used.
template <class T>
T input(int rank, std::size_t i) {
  return T((rank + 1) * 1000 + int64_t(i % 997)) / T(4);
}
template <>
uint8_t input<uint8_t>(int rank, std::size_t i) {
  return uint8_t(rank * 37 + i * 11);
}

template <class T>
int expect_all(const std::vector<T>& got, const std::vector<T>& want, const char* what, int rank) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) {
      std::cerr << "rank " << rank << ": " << what << " differs at " << i << ": " << double(got[i]) << " vs "
                << double(want[i]) << "\n";
      return 1;
    }
  return 0;
}

// All-reduce, reduce-scatter, all-gather and broadcast of `count` elements per rank of type T.
template <class T>
int check_collectives(Communicator& c, std::size_t count) {
  const int W = c.world_size(), R = c.rank();
  const DataType t = data_type_of<T>();
  int bad = 0;
  if (t != DataType::u8) {
    std::vector<T> x(count), want(count, T(0));
    for (std::size_t i = 0; i < count; ++i) x[i] = input<T>(R, i);
    for (int r = 0; r < W; ++r)
      for (std::size_t i = 0; i < count; ++i) want[i] += input<T>(r, i);
    c.all_reduce_sum(x.data(), count, t);
    bad += expect_all(x, want, "all_reduce", R);

    std::vector<T> in(count * std::size_t(W)), out(count), want_rs(count, T(0));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = input<T>(R, i);
    for (int r = 0; r < W; ++r)
      for (std::size_t i = 0; i < count; ++i) want_rs[i] += input<T>(r, std::size_t(R) * count + i);
    c.reduce_scatter_sum(in.data(), out.data(), count, t);
    bad += expect_all(out, want_rs, "reduce_scatter", R);
  }
  std::vector<T> mine(count), all(count * std::size_t(W)), want_ag(count * std::size_t(W));
  for (std::size_t i = 0; i < count; ++i) mine[i] = input<T>(R, i);
  for (int r = 0; r < W; ++r)
    for (std::size_t i = 0; i < count; ++i) want_ag[std::size_t(r) * count + i] = input<T>(r, i);
  c.all_gather(mine.data(), all.data(), count, t);
  bad += expect_all(all, want_ag, "all_gather", R);

  for (int root = 0; root < W; ++root) {
    std::vector<T> b(count), want_b(count);
    for (std::size_t i = 0; i < count; ++i) b[i] = input<T>(R, i), want_b[i] = input<T>(root, i);
    c.broadcast(b.data(), count, t, root);
    bad += expect_all(b, want_b, "broadcast", R);
  }
  c.barrier();
  return bad;
}

int collectives_worker() {
  const LaunchEnv env = launch_env_from_environment();
  const auto c = make_gloo_communicator(env, 30);
  int bad = 0;
  for (std::size_t count : {std::size_t(1), std::size_t(1000), std::size_t(100003)}) {
    bad += check_collectives<float>(*c, count);
    bad += check_collectives<double>(*c, count);
    bad += check_collectives<int64_t>(*c, count);
    bad += check_collectives<uint8_t>(*c, count);
  }
  // Bytes of the ring algorithms (nccl-tests' convention) for W = 2.
  c->reset_stats();
  std::vector<float> buf(2000);
  c->all_reduce_sum(buf.data(), 1000);
  c->reduce_scatter_sum(buf.data(), buf.data() + 1000, 500, DataType::f32);  // disjoint halves
  if (c->stats().bytes != 2 * 4000 * 1 / 2 + 500 * 4 * 1 || c->stats().calls != 2) {
    std::cerr << "stats: " << c->stats().bytes << " bytes, " << c->stats().calls << " calls\n";
    ++bad;
  }
  bool any = c->any(env.rank == 1);
  if (!any || c->any(false)) ++bad;
  return bad == 0 ? 0 : 1;
}
const bool kCollectives = testing::register_worker("collectives", collectives_worker);

TEST(Collectives, GlooTwoProcessesMatchTheReference) { EXPECT_EQ(testing::run_workers("collectives", 2), 0); }

TEST(Collectives, SingleProcessIsTheReference) {
  const auto c = make_single_process_communicator();
  EXPECT_EQ(c->world_size(), 1);
  for (std::size_t count : {std::size_t(1), std::size_t(777)}) {
    EXPECT_EQ(check_collectives<float>(*c, count), 0);
    EXPECT_EQ(check_collectives<int64_t>(*c, count), 0);
    EXPECT_EQ(check_collectives<uint8_t>(*c, count), 0);
  }
  EXPECT_EQ(c->stats().bytes, 0u);  // nothing moves at world size 1
}

TEST(LaunchEnvironment, ReadsTorchrunVariablesAndNamesBadOnes) {
  const auto with = [](std::map<std::string, std::string> vars) {
    for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(k);
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  };
  with({});
  EXPECT_EQ(launch_env_from_environment().world_size, 1);
  with({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}});
  const LaunchEnv e = launch_env_from_environment();
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 1234);
  with({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1234"}});
  EXPECT_THROW(launch_env_from_environment(), UserError);
  with({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1234"}});
  try {
    launch_env_from_environment();
    ADD_FAILURE() << "no error";
  } catch (const UserError& err) {
    EXPECT_NE(std::string(err.what()).find("RANK"), std::string::npos) << err.what();
  }
  with({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_THROW(launch_env_from_environment(), UserError);  // no MASTER_PORT
  with({});
}

TEST(DataParallel, RanksTakeTheirPieceOfEveryMinibatch) {
  EXPECT_EQ(rank_prompts(8, 2, 2, 0), (std::vector<int64_t>{0, 1, 4, 5}));
  EXPECT_EQ(rank_prompts(8, 2, 2, 1), (std::vector<int64_t>{2, 3, 6, 7}));
  EXPECT_EQ(rank_prompts(3, 2, 1, 0), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_THROW(rank_prompts(6, 2, 2, 0), UserError);
  EXPECT_EQ(rank_rows(4, 2, 2, 2, 1), (std::vector<int64_t>{2, 3, 6, 7}));  // prompts 1 and 3
  EXPECT_EQ(rank_range(10, 3, 2), std::make_pair(int64_t(6), int64_t(10)));
}

int fail_on_rank1_worker() {
  if (launch_env_from_environment().rank == 1) return 3;
  std::this_thread::sleep_for(std::chrono::seconds(120));  // the launcher must stop this rank
  return 0;
}
const bool kFailOnRank1 = testing::register_worker("fail_on_rank1", fail_on_rank1_worker);

TEST(Launcher, StopsEveryRankWhenOneFailsAndReturnsItsCode) {
  const auto t0 = std::chrono::steady_clock::now();
  ::testing::internal::CaptureStderr();
  const int code = testing::run_workers("fail_on_rank1", 2);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 3);
  EXPECT_NE(log.find("rank 1 (pid"), std::string::npos) << log;
  EXPECT_NE(log.find("exited with code 3"), std::string::npos) << log;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
}

// The collectives on CUDA tensors' memory (no host staging), with exact integer-valued floats.
int check_device_collectives(Communicator& c, int local_rank) {
  const int64_t W = c.world_size(), r = c.rank(), n = 4099;
  const auto opts = torch::dtype(torch::kFloat32).device(torch::Device(torch::kCUDA, local_rank));
  const torch::Tensor idx = torch::arange(n, torch::kFloat32);
  int bad = 0;
  const auto expect = [&](const char* what, const torch::Tensor& got, const torch::Tensor& want) {
    if (torch::equal(got.cpu(), want)) return;
    std::cerr << "device " << what << " differs on rank " << r << "\n";
    ++bad;
  };
  torch::Tensor x = torch::arange(n, opts) * float(r + 1);
  c.all_reduce_sum(x.data_ptr<float>(), std::size_t(n), DataType::f32);
  expect("all_reduce", x, idx * float(W * (W + 1) / 2));
  const torch::Tensor in = torch::arange(W * n, opts) + float(r);
  torch::Tensor out = torch::empty({n}, opts);
  c.reduce_scatter_sum(in.data_ptr<float>(), out.data_ptr<float>(), std::size_t(n), DataType::f32);
  expect("reduce_scatter", out, (idx + float(r * n)) * float(W) + float(W * (W - 1) / 2));
  const torch::Tensor mine = torch::full({n}, float(r), opts);
  torch::Tensor all = torch::empty({W * n}, opts);
  c.all_gather(mine.data_ptr<float>(), all.data_ptr<float>(), std::size_t(n), DataType::f32);
  expect("all_gather", all, torch::arange(W, torch::kFloat32).repeat_interleave(n));
  torch::Tensor b = torch::full({n}, float(r), opts);
  c.broadcast(b.data_ptr<float>(), std::size_t(n), DataType::f32, int(W - 1));
  expect("broadcast", b, torch::full({n}, float(W - 1)));
  return bad;
}

int nccl_collectives_worker() {
  const LaunchEnv env = launch_env_from_environment();
  const auto c = make_nccl_communicator(env, 60);
  int bad = check_device_collectives(*c, env.local_rank);
  for (std::size_t count : {std::size_t(1), std::size_t(100003)}) {
    bad += check_collectives<float>(*c, count);
    bad += check_collectives<double>(*c, count);
    bad += check_collectives<int64_t>(*c, count);
    bad += check_collectives<uint8_t>(*c, count);
  }
  return bad == 0 ? 0 : 1;
}
const bool kNcclCollectives = testing::register_worker("nccl_collectives", nccl_collectives_worker);

// One rank per visible GPU (world size 1 on a single GPU): host buffers (staged) and device buffers
// (used in place).
TEST(Nccl, CollectivesOnEveryVisibleGpuMatchTheReference) {
  const std::string why = nccl_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "NCCL not usable here: " << why;
  EXPECT_EQ(testing::run_workers("nccl_collectives", cuda_device_count()), 0);
}

}  // namespace
}  // namespace unstuck::dist
