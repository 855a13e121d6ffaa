// The model's own autograd functions, used by llama.cpp's forward passes: activation checkpointing
// of a block, an adapter's product with lora.dropout, and the linear and embedding layers whose weight
// gradients go straight into FP32 sinks (ranges of the trainer's flat gradient). Internal to model/.
#pragma once

#include <torch/types.h>

#include <optional>
#include <vector>

#include "unstuck/model/llama.h"

namespace unstuck::model {

// Parameters of one block that take gradients, in a fixed order (the checkpointed block's inputs):
// the base's, then its adapters'.
std::vector<torch::Tensor> block_trainable(const LlamaModel& model, int64_t layer);

// LlamaModel::block() of `layer` that keeps only its input and recomputes itself in the backward;
// returns {y}, or {y, k, v} when `capture` (a shared prompt's pass). `prompt_k`, `prompt_v` and
// `of_row`: a completion pass's prompt keys and values, whose gradients it returns. `weights`:
// block_trainable(*model, layer).
std::vector<torch::Tensor> checkpointed_block(const torch::Tensor& x, const torch::Tensor& cos,
                                              const torch::Tensor& sin, const std::optional<torch::Tensor>& mask,
                                              const std::optional<torch::Tensor>& prompt_k,
                                              const std::optional<torch::Tensor>& prompt_v,
                                              const std::optional<torch::Tensor>& of_row, at::TensorList weights,
                                              const LlamaModel* model, int64_t layer, bool causal, bool capture,
                                              const DropoutPass* dropout);

// x W^T (+ b) whose backward adds the weight's (and bias's) gradient into the FP32 sinks.
torch::Tensor linear_into_sink(const torch::Tensor& x, const torch::Tensor& w, const std::optional<torch::Tensor>& b,
                               const torch::Tensor& w_sink, const std::optional<torch::Tensor>& b_sink);

// The embedding rows of `tokens` whose backward adds each row's gradient into the FP32 sink.
torch::Tensor embedding_into_sink(const torch::Tensor& weight, const torch::Tensor& tokens, const torch::Tensor& sink);

}  // namespace unstuck::model
