#include "gpu/step_buffers.h"

namespace ctrbox {

void HostRows::Gather(const RowBlock& r, const std::vector<uint32_t>& locals, ThreadPool* pool) {
  RunParallelRange(pool, locals.size(), [&](size_t i) {
    const uint32_t l = locals[i];
    show[i] = r.show(l);
    click[i] = r.click(l);
    wide[i] = r.wide(l);
    unseen[i] = r.unseen(l);
    flags[i] = r.flags(l);
    std::copy_n(r.wide_state(l), layout.wide_state, wide_state.data() + i * layout.wide_state);
    std::copy_n(r.emb(l), layout.dim, emb.data() + i * layout.dim);
    std::copy_n(r.emb_state(l), layout.emb_state, emb_state.data() + i * layout.emb_state);
  });
}

void HostRows::Scatter(const std::vector<uint32_t>& locals, RowBlock* r, ThreadPool* pool) const {
  RunParallelRange(pool, locals.size(), [&](size_t i) {
    const uint32_t l = locals[i];
    r->show(l) = show[i];
    r->click(l) = click[i];
    r->wide(l) = wide[i];
    r->unseen(l) = unseen[i];
    r->flags(l) = flags[i];
    std::copy_n(wide_state.data() + i * layout.wide_state, layout.wide_state, r->wide_state(l));
    std::copy_n(emb.data() + i * layout.dim, layout.dim, r->emb(l));
    std::copy_n(emb_state.data() + i * layout.emb_state, layout.emb_state, r->emb_state(l));
  });
}

}  // namespace ctrbox
