//! [`Kernels`] for every [`Device`]: each method checks its call against the contract
//! (operand lengths, whole rows, overlapping writes, the attention and cache shapes),
//! then hands the device its checked sizes. The only place those checks are written.

use alloc::format;

use super::{AttentionGrads, AttentionSaved, Device, HeadOperands};
use crate::contract::{
    check_disjoint, expect_len, AdamWScalars, AttentionDims, AttentionSizes, CacheSizes,
    ChoiceSizes, ContractError, DecodeSizes, EmbeddingSizes, HeadDims, LengthRule, RopeSizes, Rows,
};
use crate::kernels::{
    AdamWStep, AttentionShape, BufferId, IndexBufferId, Indices, Kernels, MatmulShape,
    ProjectedRows, Tensor,
};

/// Fails unless every operand of `op` named in `operands` has `len` elements.
fn same_len<E: From<crate::ContractError>>(
    op: &str,
    len: usize,
    operands: &[(&str, &Tensor)],
) -> Result<(), E> {
    for (name, tensor) in operands {
        expect_len(op, name, tensor.len, len)?;
    }
    Ok(())
}

impl<D: Device> Kernels for D {
    type Error = D::Error;

    fn alloc(&mut self, len: usize) -> Result<BufferId, D::Error> {
        Device::alloc(self, len)
    }

    fn alloc_indices(&mut self, len: usize) -> Result<IndexBufferId, D::Error> {
        Device::alloc_indices(self, len)
    }

    fn alloc_kv_cache(&mut self, len: usize) -> Result<BufferId, D::Error> {
        Device::alloc_kv_cache(self, len)
    }

    fn alloc_frozen(&mut self, len: usize) -> Result<BufferId, D::Error> {
        Device::alloc_frozen(self, len)
    }

    fn free(&mut self, buffer: BufferId) -> Result<(), D::Error> {
        Device::free(self, buffer)
    }

    fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), D::Error> {
        Device::free_indices(self, buffer)
    }

    fn write(&mut self, dst: Tensor, src: &[f32]) -> Result<(), D::Error> {
        expect_len("write", "src", src.len(), dst.len)?;
        Device::write(self, dst, src)
    }

    fn write_indices(&mut self, dst: Indices, src: &[u32]) -> Result<(), D::Error> {
        expect_len("write_indices", "src", src.len(), dst.len)?;
        Device::write_indices(self, dst, src)
    }

    fn read(&mut self, src: Tensor, dst: &mut [f32]) -> Result<(), D::Error> {
        expect_len("read", "dst", dst.len(), src.len)?;
        Device::read(self, src, dst)
    }

    fn fill(&mut self, dst: Tensor, value: f32) -> Result<(), D::Error> {
        Device::fill(self, dst, value)
    }

    fn copy(&mut self, dst: Tensor, src: Tensor) -> Result<(), D::Error> {
        expect_len("copy", "src", src.len, dst.len)?;
        check_disjoint(&[dst], &[src])?;
        Device::copy(self, dst, src)
    }

    fn add_assign(&mut self, dst: Tensor, src: Tensor) -> Result<(), D::Error> {
        expect_len("add_assign", "src", src.len, dst.len)?;
        check_disjoint(&[dst], &[src])?;
        Device::add_assign(self, dst, src)
    }

    fn scale(&mut self, dst: Tensor, factor: f32) -> Result<(), D::Error> {
        Device::scale(self, dst, factor)
    }

    fn sum_squares(&mut self, src: Tensor) -> Result<f32, D::Error> {
        Device::sum_squares(self, src)
    }

    fn embedding_forward(
        &mut self,
        out: Tensor,
        table: Tensor,
        tokens: Indices,
        dim: usize,
    ) -> Result<(), D::Error> {
        let op = "embedding_forward";
        let sizes = EmbeddingSizes::new(op, &table, ("out", &out), tokens.len, dim)?;
        check_disjoint(&[out], &[table])?;
        Device::embedding_forward(self, out, table, tokens, sizes)
    }

    fn embedding_backward(
        &mut self,
        dtable: Tensor,
        dout: Tensor,
        tokens: Indices,
        dim: usize,
    ) -> Result<(), D::Error> {
        let op = "embedding_backward";
        let sizes = EmbeddingSizes::new(op, &dtable, ("dout", &dout), tokens.len, dim)?;
        check_disjoint(&[dtable], &[dout])?;
        Device::embedding_backward(self, dtable, dout, tokens, sizes)
    }

    fn rmsnorm_forward(
        &mut self,
        out: Tensor,
        rstd: Tensor,
        x: Tensor,
        weight: Tensor,
        dim: usize,
        eps: f32,
    ) -> Result<(), D::Error> {
        let op = "rmsnorm_forward";
        let rows = Rows::of(op, "x", x.len, dim)?;
        expect_len(op, "weight", weight.len, dim)?;
        expect_len(op, "out", out.len, x.len)?;
        expect_len(op, "rstd", rstd.len, rows.rows)?;
        check_disjoint(&[out, rstd], &[x, weight])?;
        Device::rmsnorm_forward(self, out, rstd, x, weight, rows, eps)
    }

    fn rmsnorm_backward(
        &mut self,
        dx: Tensor,
        dweight: Tensor,
        dout: Tensor,
        x: Tensor,
        weight: Tensor,
        rstd: Tensor,
        dim: usize,
    ) -> Result<(), D::Error> {
        let op = "rmsnorm_backward";
        let rows = Rows::of(op, "x", x.len, dim)?;
        same_len(op, dim, &[("weight", &weight), ("dweight", &dweight)])?;
        same_len(op, x.len, &[("dout", &dout), ("dx", &dx)])?;
        expect_len(op, "rstd", rstd.len, rows.rows)?;
        check_disjoint(&[dx, dweight], &[dout, x, weight, rstd])?;
        Device::rmsnorm_backward(self, dx, dweight, dout, x, weight, rstd, rows)
    }

    fn matmul(
        &mut self,
        c: Tensor,
        a: Tensor,
        b: Tensor,
        shape: MatmulShape,
    ) -> Result<(), D::Error> {
        let MatmulShape { m, n, k, .. } = shape;
        expect_len("matmul", "a", a.len, m * k)?;
        expect_len("matmul", "b", b.len, k * n)?;
        expect_len("matmul", "c", c.len, m * n)?;
        check_disjoint(&[c], &[a, b])?;
        Device::matmul(self, c, a, b, shape)
    }

    fn matmul_shared_input(
        &mut self,
        c: &[Tensor],
        a: Tensor,
        b: &[Tensor],
        shape: MatmulShape,
    ) -> Result<(), D::Error> {
        let op = "matmul_shared_input";
        let MatmulShape { m, n, k, .. } = shape;
        if b.len() != c.len() {
            return Err(ContractError::BadArgument(format!(
                "{op}: {} outputs `c` but {} second operands `b`; need one `b` each",
                c.len(),
                b.len()
            ))
            .into());
        }
        expect_len(op, "a", a.len, m * k)?;
        for (&c, &b) in c.iter().zip(b) {
            expect_len(op, "b", b.len, k * n)?;
            expect_len(op, "c", c.len, m * n)?;
        }
        check_disjoint(c, b)?;
        check_disjoint(c, &[a])?;
        Device::matmul_shared_input(self, c, a, b, shape)
    }

    fn add_bias(&mut self, out: Tensor, bias: Tensor) -> Result<(), D::Error> {
        Rows::of("add_bias", "out", out.len, bias.len)?;
        check_disjoint(&[out], &[bias])?;
        Device::add_bias(self, out, bias)
    }

    fn bias_backward(&mut self, dbias: Tensor, dout: Tensor) -> Result<(), D::Error> {
        let rows = Rows::of("bias_backward", "dout", dout.len, dbias.len)?;
        check_disjoint(&[dbias], &[dout])?;
        Device::bias_backward(self, dbias, dout, rows)
    }

    fn rope_forward(
        &mut self,
        x: Tensor,
        positions: Indices,
        heads: usize,
        head_dim: usize,
        theta: f32,
    ) -> Result<(), D::Error> {
        let sizes = RopeSizes::new("rope_forward", &x, positions.len, heads, head_dim)?;
        Device::rope_forward(self, x, positions, sizes, theta)
    }

    fn add_bias_rope_forward(
        &mut self,
        x: Tensor,
        bias: Tensor,
        positions: Indices,
        heads: usize,
        head_dim: usize,
        theta: f32,
    ) -> Result<(), D::Error> {
        let op = "add_bias_rope_forward";
        let sizes = RopeSizes::new(op, &x, positions.len, heads, head_dim)?;
        expect_len(op, "bias", bias.len, heads * head_dim)?;
        check_disjoint(&[x], &[bias])?;
        Device::add_bias_rope_forward(self, x, bias, positions, sizes, theta)
    }

    fn rope_backward(
        &mut self,
        dx: Tensor,
        positions: Indices,
        heads: usize,
        head_dim: usize,
        theta: f32,
    ) -> Result<(), D::Error> {
        let sizes = RopeSizes::new("rope_backward", &dx, positions.len, heads, head_dim)?;
        Device::rope_backward(self, dx, positions, sizes, theta)
    }

    fn attention_forward(
        &mut self,
        out: Tensor,
        lse: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        seq_starts: &[u32],
        shape: AttentionShape,
    ) -> Result<(), D::Error> {
        let sizes = AttentionSizes::new(
            "attention_forward",
            seq_starts,
            shape,
            &[("q", &q), ("out", &out)],
            &[("k", &k), ("v", &v)],
            &[("lse", &lse)],
        )?;
        check_disjoint(&[out, lse], &[q, k, v])?;
        Device::attention_forward(self, out, lse, q, k, v, seq_starts, sizes)
    }

    fn attention_backward(
        &mut self,
        dq: Tensor,
        dk: Tensor,
        dv: Tensor,
        dout: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        lse: Tensor,
        seq_starts: &[u32],
        shape: AttentionShape,
    ) -> Result<(), D::Error> {
        let sizes = AttentionSizes::new(
            "attention_backward",
            seq_starts,
            shape,
            &[("q", &q), ("out", &out), ("dout", &dout), ("dq", &dq)],
            &[("k", &k), ("v", &v), ("dk", &dk), ("dv", &dv)],
            &[("lse", &lse)],
        )?;
        check_disjoint(&[dq, dk, dv], &[dout, q, k, v, out, lse])?;
        let grads = AttentionGrads { dq, dk, dv };
        let saved = AttentionSaved {
            dout,
            q,
            k,
            v,
            out,
            lse,
        };
        Device::attention_backward(self, grads, saved, seq_starts, sizes)
    }

    fn kv_cache_append(
        &mut self,
        k_cache: Tensor,
        v_cache: Tensor,
        k: Tensor,
        v: Tensor,
        lengths: &[u32],
        capacity: usize,
        kv_dim: usize,
    ) -> Result<(), D::Error> {
        let op = "kv_cache_append";
        same_len(op, lengths.len() * kv_dim, &[("k", &k), ("v", &v)])?;
        let caches = [&k_cache, &v_cache];
        let sizes = CacheSizes::new(op, caches, lengths, capacity, kv_dim, LengthRule::Filled)?;
        check_disjoint(&[k_cache, v_cache], &[k, v])?;
        Device::kv_cache_append(self, [k_cache, v_cache], k, v, lengths, sizes)
    }

    fn rope_append_kv(
        &mut self,
        rows: ProjectedRows,
        positions: Indices,
        k_cache: Tensor,
        v_cache: Tensor,
        lengths: &[u32],
        capacity: usize,
        shape: AttentionShape,
        theta: f32,
    ) -> Result<(), D::Error> {
        let op = "rope_append_kv";
        let dims = AttentionDims::new(op, shape)?;
        let caches = [&k_cache, &v_cache];
        let rule = LengthRule::Filled;
        let cache = CacheSizes::new(op, caches, lengths, capacity, dims.kv_width, rule)?;
        expect_len(op, "q", rows.q.len, cache.batch * dims.q_width)?;
        let kv_len = cache.batch * dims.kv_width;
        same_len(op, kv_len, &[("k", &rows.k), ("v", &rows.v)])?;
        RopeSizes::new(op, &rows.q, positions.len, dims.heads, dims.head_dim)?;
        let widths = [dims.q_width, dims.kv_width, dims.kv_width];
        let names = ["q_bias", "k_bias", "v_bias"];
        for ((bias, width), name) in rows.biases.iter().zip(widths).zip(names) {
            if let Some(bias) = bias {
                expect_len(op, name, bias.len, width)?;
            }
        }
        let no_bias = Tensor::whole(k_cache.buffer, 0);
        let biases = rows.biases.map(|bias| bias.unwrap_or(no_bias));
        check_disjoint(&[rows.q, rows.k, rows.v, k_cache, v_cache], &biases)?;
        let sizes = DecodeSizes { dims, cache };
        let caches = [k_cache, v_cache];
        Device::rope_append_kv(self, rows, positions, caches, lengths, sizes, theta)
    }

    fn attention_decode(
        &mut self,
        out: Tensor,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        lengths: &[u32],
        capacity: usize,
        shape: AttentionShape,
    ) -> Result<(), D::Error> {
        let op = "attention_decode";
        let dims = AttentionDims::new(op, shape)?;
        same_len(
            op,
            lengths.len() * dims.q_width,
            &[("q", &q), ("out", &out)],
        )?;
        let caches = [&k_cache, &v_cache];
        let rule = LengthRule::Attended;
        let cache = CacheSizes::new(op, caches, lengths, capacity, dims.kv_width, rule)?;
        check_disjoint(&[out], &[q, k_cache, v_cache])?;
        let sizes = DecodeSizes { dims, cache };
        Device::attention_decode(self, out, q, [k_cache, v_cache], lengths, sizes)
    }

    fn attention_cached(
        &mut self,
        out: Tensor,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        sequences: &[u32],
        attended: &[u32],
        capacity: usize,
        shape: AttentionShape,
    ) -> Result<(), D::Error> {
        let op = "attention_cached";
        let dims = AttentionDims::new(op, shape)?;
        same_len(
            op,
            sequences.len() * dims.q_width,
            &[("q", &q), ("out", &out)],
        )?;
        let caches = [&k_cache, &v_cache];
        let cache = CacheSizes::for_rows(op, caches, sequences, attended, capacity, dims.kv_width)?;
        check_disjoint(&[out], &[q, k_cache, v_cache])?;
        let sizes = DecodeSizes { dims, cache };
        Device::attention_cached(self, out, q, [k_cache, v_cache], sequences, attended, sizes)
    }

    fn swiglu_forward(&mut self, out: Tensor, gate: Tensor, up: Tensor) -> Result<(), D::Error> {
        same_len("swiglu_forward", out.len, &[("gate", &gate), ("up", &up)])?;
        check_disjoint(&[out], &[gate, up])?;
        Device::swiglu_forward(self, out, gate, up)
    }

    fn swiglu_backward(
        &mut self,
        dgate: Tensor,
        dup: Tensor,
        dout: Tensor,
        gate: Tensor,
        up: Tensor,
    ) -> Result<(), D::Error> {
        let operands = [
            ("dgate", &dgate),
            ("dup", &dup),
            ("gate", &gate),
            ("up", &up),
        ];
        same_len("swiglu_backward", dout.len, &operands)?;
        check_disjoint(&[dgate, dup], &[dout, gate, up])?;
        Device::swiglu_backward(self, dgate, dup, dout, gate, up)
    }

    fn logprob_forward(
        &mut self,
        logp: Tensor,
        lse: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        targets: Indices,
    ) -> Result<(), D::Error> {
        let op = "logprob_forward";
        let dims = HeadDims::new(op, targets.len, hidden.len, lm_head.len)?;
        same_len(op, dims.rows, &[("logp", &logp), ("lse", &lse)])?;
        check_disjoint(&[logp, lse], &[hidden, lm_head])?;
        let head = HeadOperands {
            hidden,
            lm_head,
            targets,
        };
        Device::logprob_forward(self, logp, lse, head, dims)
    }

    fn logprob_backward(
        &mut self,
        dhidden: Tensor,
        dlm_head: Option<Tensor>,
        weights: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        targets: Indices,
        lse: Tensor,
    ) -> Result<(), D::Error> {
        let op = "logprob_backward";
        let dims = HeadDims::new(op, targets.len, hidden.len, lm_head.len)?;
        same_len(op, dims.rows, &[("weights", &weights), ("lse", &lse)])?;
        expect_len(op, "dhidden", dhidden.len, hidden.len)?;
        let reads = [weights, hidden, lm_head, lse];
        match dlm_head {
            Some(dlm_head) => {
                expect_len(op, "dlm_head", dlm_head.len, lm_head.len)?;
                check_disjoint(&[dhidden, dlm_head], &reads)?;
            }
            None => check_disjoint(&[dhidden], &reads)?,
        }
        let head = HeadOperands {
            hidden,
            lm_head,
            targets,
        };
        Device::logprob_backward(self, dhidden, dlm_head, weights, lse, head, dims)
    }

    fn logits(
        &mut self,
        out: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        dim: usize,
    ) -> Result<(), D::Error> {
        let dims = HeadDims::of_logits(hidden.len, lm_head.len, out.len, dim)?;
        check_disjoint(&[out], &[hidden, lm_head])?;
        Device::logits(self, out, hidden, lm_head, dims)
    }

    fn choose_tokens(
        &mut self,
        choices: Tensor,
        logits: Tensor,
        uniforms: &[f64],
        temperature: f32,
    ) -> Result<(), D::Error> {
        let sizes = ChoiceSizes::new(choices.len, logits.len, uniforms, temperature)?;
        check_disjoint(&[choices], &[logits])?;
        Device::choose_tokens(self, choices, logits, uniforms, sizes)
    }

    fn adamw(
        &mut self,
        params: Tensor,
        grads: Tensor,
        m: Tensor,
        v: Tensor,
        step: AdamWStep,
    ) -> Result<(), D::Error> {
        same_len(
            "adamw",
            params.len,
            &[("grads", &grads), ("m", &m), ("v", &v)],
        )?;
        check_disjoint(&[params, m, v], &[grads])?;
        let scalars = AdamWScalars::new(step)?;
        Device::adamw(self, params, grads, m, v, scalars)
    }

    fn repeated_step<E>(
        &mut self,
        step: &mut dyn FnMut(&mut Self) -> Result<(), E>,
    ) -> Result<Result<(), E>, D::Error> {
        Device::repeated_step(self, step)
    }
}
