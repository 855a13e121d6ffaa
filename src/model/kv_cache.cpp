// The KV cache's own operations (llama.h's KVCache): growth to its capacity a block of slots at a
// time, and the row moves of a rollout (keep, move to the front, copy from another cache).
#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/model/llama.h"

namespace unstuck::model {

void KVCache::reserve(int64_t slots) {
  if (slots <= allocated()) return;
  if (slots > capacity)
    throw UserError("KV cache full: " + std::to_string(slots) + " slots exceed its capacity of " +
                    std::to_string(capacity));
  const int64_t n = std::min(capacity, (slots + grow_slots - 1) / grow_slots * grow_slots);
  const auto grown = [&](const torch::Tensor& t, int64_t dim) {
    std::vector<int64_t> shape = t.sizes().vec();
    shape[std::size_t(dim)] = n;
    torch::Tensor out = torch::zeros(shape, t.options());
    out.narrow(dim, 0, length).copy_(t.narrow(dim, 0, length));
    return out;
  };
  for (std::vector<torch::Tensor>* kv : {&k, &v})
    for (torch::Tensor& t : *kv) t = grown(t, 2);
  key_valid = grown(key_valid, 1);
  key_position = grown(key_position, 1);
}

void KVCache::keep_rows(const torch::Tensor& rows) {
  move_rows_to_front(rows);
  *this = first_rows(rows.size(0));  // the first n rows of the same buffers
}

void KVCache::move_rows_to_front(const torch::Tensor& rows) {
  const int64_t n = rows.size(0);
  // index_select first: a row may move onto a row that another one is read from.
  for (std::vector<torch::Tensor>* kv : {&k, &v})
    for (torch::Tensor& t : *kv)
      t.narrow(0, 0, n).narrow(2, 0, length).copy_(t.narrow(2, 0, length).index_select(0, rows));
  for (torch::Tensor* t : {&key_valid, &key_position}) t->narrow(0, 0, n).copy_(t->index_select(0, rows));
  next_position.narrow(0, 0, n).copy_(next_position.index_select(0, rows));
}

KVCache KVCache::first_rows(int64_t n) const {
  KVCache c = *this;
  for (std::vector<torch::Tensor>* kv : {&c.k, &c.v})
    for (torch::Tensor& t : *kv) t = t.narrow(0, 0, n);
  c.key_valid = key_valid.narrow(0, 0, n);
  c.key_position = key_position.narrow(0, 0, n);
  c.next_position = next_position.narrow(0, 0, n);
  return c;
}

void KVCache::copy_rows_from(const KVCache& from, const torch::Tensor& rows) {
  if (rows.dim() != 1 || rows.size(0) != batch() || from.length > capacity || from.k.size() != k.size())
    throw std::invalid_argument("KVCache::copy_rows_from: expected one source row per row and room for " +
                                std::to_string(from.length) + " slots");
  const int64_t L = from.length;
  reserve(L);
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i].narrow(2, 0, L).copy_(from.k[i].narrow(2, 0, L).index_select(0, rows));
    v[i].narrow(2, 0, L).copy_(from.v[i].narrow(2, 0, L).index_select(0, rows));
  }
  key_valid.narrow(1, 0, L).copy_(from.key_valid.narrow(1, 0, L).index_select(0, rows));
  key_position.narrow(1, 0, L).copy_(from.key_position.narrow(1, 0, L).index_select(0, rows));
  next_position = from.next_position.index_select(0, rows);
  length = L;
  has_holes = from.has_holes;
}

}  // namespace unstuck::model
