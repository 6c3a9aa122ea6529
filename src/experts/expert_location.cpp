// Expert locations in checkpoint files and the merging of parts into aligned reads.
#include "experts/expert_location.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "formats/checkpoint.h"
#include "io/direct_reader.h"

namespace sluice {

uint64_t ExpertLocation::slot_end() const {
    uint64_t end = 0;
    for (int k = 0; k < n_parts; ++k) {
        const ExpertPart& p = parts[size_t(k)];
        end = std::max(end, p.slot_offset + io::padded_bytes(p.offset, p.length));
    }
    return end;
}

void merge_reads(ExpertLocation& loc) {
    loc.n_reads = 0;
    for (int k = 0; k < loc.n_parts; ++k) {
        const ExpertPart& p = loc.parts[size_t(k)];
        if (loc.n_reads > 0) {
            ExpertPart& r = loc.reads[size_t(loc.n_reads - 1)];
            const uint64_t a = io::k_direct_alignment_bytes;
            const uint64_t r_base = io::align_down(r.offset, a), p_base = io::align_down(p.offset, a);
            if (r.file == p.file && p_base >= r_base && p.offset >= r.offset + r.length &&
                p_base - r_base == p.slot_offset - r.slot_offset) {
                r.length = p.offset + p.length - r.offset;
                continue;
            }
        }
        loc.reads[size_t(loc.n_reads++)] = p;
    }
}

std::string hex64(uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
    return buf;
}

std::vector<uint64_t> expert_part_lengths(const ExpertWeights& w) {
    std::vector<uint64_t> out;
    for (int k = 0; k < 3; ++k) {
        const Weight& m = expert_matrix(w, k);
        if (m.data && m.data_bytes() > 0) out.push_back(m.data_bytes());
        if (m.scales && m.scale_bytes() > 0) out.push_back(m.scale_bytes());
    }
    return out;
}

ExpertLayout locate_in_checkpoint(const Checkpoint& ck, const std::vector<std::vector<ExpertWeights>>& views) {
    ExpertLayout layout;
    layout.origin = ck.dir();
    for (const auto& f : ck.files()) layout.paths.push_back(f->path());
    layout.where.resize(views.size());
    for (size_t l = 0; l < views.size(); ++l) {
        for (const auto& w : views[l]) {
            ExpertLocation loc;
            loc.shape = w;
            uint64_t off = 0;
            for (int k = 0; k < 3; ++k) {
                const Weight& m = expert_matrix(w, k);
                const uint8_t* ptrs[2] = {m.data, m.scales};
                const uint64_t lens[2] = {m.data_bytes(), m.scale_bytes()};
                for (int s = 0; s < 2; ++s) {
                    if (!ptrs[s] || lens[s] == 0) continue;
                    ExpertPart& p = loc.parts[size_t(loc.n_parts++)];
                    ck.locate(ptrs[s], &p.file, &p.offset);
                    p.length = lens[s];
                    p.slot_offset = off;
                    off += io::padded_bytes(p.offset, p.length);
                }
            }
            merge_reads(loc);
            layout.where[l].push_back(loc);
        }
    }
    return layout;
}

}  // namespace sluice
