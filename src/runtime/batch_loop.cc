// The shared step loop over a Context (see lynx/batch_loop.h).
#include "lynx/batch_loop.h"

#include <algorithm>
#include <chrono>

#include "lynx/error.h"

namespace lynx {

BatchLoop::BatchLoop(Context& ctx, const BatchLoopOptions& opts) : ctx_(ctx), opts_(opts) {
  if (opts.max_step_tokens < 1) throw Error("batch loop: max_step_tokens must be positive");
}

int32_t BatchLoop::add(LoopSequence s) {
  if (s.prompt.empty() && s.next == kEndSequence) {
    throw Error("batch loop: a sequence needs a prompt or a first token");
  }
  if (!s.on_logits) throw Error("batch loop: a sequence needs an on_logits hook");
  Entry e;
  e.seq = s.seq >= 0 ? s.seq : ctx_.new_sequence();
  e.s = std::move(s);
  entries_.push_back(std::move(e));
  return entries_.back().seq;
}

void BatchLoop::remove(int32_t seq) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].seq == seq) {
      ctx_.free_sequence(seq);
      entries_.erase(entries_.begin() + long(i));
      return;
    }
  }
}

bool BatchLoop::prefill_pending() const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [](const Entry& e) { return e.prefilled < e.s.prompt.size(); });
}

// Puts up to `budget` prompt tokens of entry i into the batch. The prompt's last token gets
// logits when the first decode token is not known yet.
void BatchLoop::add_prefill(Entry& e, size_t i, int budget) {
  size_t n = std::min(size_t(budget), e.s.prompt.size() - e.prefilled);
  const int32_t base = ctx_.sequence_length(e.seq);
  const int32_t end = base + int32_t(e.s.prompt.size() - e.prefilled);  // the prompt's end
  // Cut at the next snapshot length inside this chunk, or skip it when a piece is too short.
  const auto& at = e.s.snapshot_at;
  for (; e.snapshots < at.size() && at[e.snapshots] < base + int32_t(n); ++e.snapshots) {
    const int32_t len = at[e.snapshots];
    if (len - base >= kMinPrefillPiece && end - len >= kMinPrefillPiece) {
      n = size_t(len - base);
      break;
    }
  }
  for (size_t j = 0; j < n; ++j) {
    BatchToken t;
    t.token = e.s.prompt[e.prefilled + j];
    t.seq = e.seq;
    t.pos = base + int32_t(j);
    t.flags = kTokenPrefill;
    t.logits = e.prefilled + j + 1 == e.s.prompt.size() && e.s.next == kEndSequence;
    batch_.push_back(t);
    if (t.logits) owner_.push_back(i);
  }
  chunks_.emplace_back(i, n);
}

StepReport BatchLoop::step() {
  StepReport rep;
  batch_.clear();
  owner_.clear();
  chunks_.clear();
  int budget = opts_.max_step_tokens;
  if (!opts_.mix_prefill && prefill_pending()) {
    // Separate prefill: the first sequence still in prefill, alone.
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].prefilled < entries_[i].s.prompt.size()) {
        add_prefill(entries_[i], i, budget);
        break;
      }
    }
  } else {
    // Decode tokens first (one per decoding sequence), then prompt chunks in admission order.
    for (size_t i = 0; i < entries_.size(); ++i) {
      Entry& e = entries_[i];
      if (e.prefilled < e.s.prompt.size()) continue;
      BatchToken t;
      t.token = e.s.next;
      t.seq = e.seq;
      t.pos = ctx_.sequence_length(e.seq);
      t.flags = e.s.decode_flags;
      t.logits = true;
      batch_.push_back(t);
      owner_.push_back(i);
      --budget;
    }
    for (size_t i = 0; i < entries_.size() && budget > 0; ++i) {
      Entry& e = entries_[i];
      if (e.prefilled >= e.s.prompt.size()) continue;
      add_prefill(e, i, budget);
      budget -= int(chunks_.back().second);
    }
  }
  if (batch_.empty()) return rep;

  const auto t0 = std::chrono::steady_clock::now();
  ctx_.eval(batch_);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& [i, n] : chunks_) {
    Entry& e = entries_[i];
    e.prefilled += n;
    rep.n_prefill += int(n);
    const auto& at = e.s.snapshot_at;
    if (e.snapshots < at.size() && at[e.snapshots] == ctx_.sequence_length(e.seq)) {
      ctx_.snapshot_sequence(e.seq);
      ++e.snapshots;
    }
  }
  rep.n_decode = int(batch_.size()) - rep.n_prefill;

  for (size_t r = 0; r < owner_.size(); ++r) {
    Entry& e = entries_[owner_[r]];
    const int32_t next = e.s.on_logits(ctx_.logits(int(r)));
    if (next == kEndSequence) {
      e.ended = true;
    } else {
      e.s.next = next;
    }
  }
  // Retire ended sequences, last first (indices stay valid).
  for (size_t i = entries_.size(); i-- > 0;) {
    if (!entries_[i].ended) continue;
    if (!entries_[i].s.keep) ctx_.free_sequence(entries_[i].seq);
    auto on_end = std::move(entries_[i].s.on_end);
    entries_.erase(entries_.begin() + long(i));
    if (on_end) on_end();
  }
  return rep;
}

}  // namespace lynx
