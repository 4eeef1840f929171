//! `sage import`: GGUF files written here, tensor by tensor in every supported type,
//! come out as Hugging Face directories whose values equal the formats' definitions to
//! the bit, whose Llama q/k rows are back in transformers' order, whose model loads and
//! whose tokenizer splits digits as SmolLM's does; malformed files fail with the tensor
//! or key named. With `SAGE_SMOLLM2_GGUF=path` (CI downloads the file), the real
//! SmolLM2-135M-Instruct imports and answers a question.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::f16;
use sage_backend_cpu::CpuBackend;
use sage_trainer::import::{import_gguf, ImportError};
use sage_trainer::tokenizer::Tokenizer;
use sage_trainer::weights::{load_model, read_config, read_safetensors, Dtype};
use sage_transformer::KvCache;

/// A metadata value of the GGUF being written.
enum Meta {
    U32(u32),
    F32(f32),
    Text(String),
    Texts(Vec<String>),
    I32s(Vec<i32>),
}

/// A tensor being written: GGUF dims (fastest first), GGML type id, bytes.
struct Raw {
    name: String,
    dims: Vec<u64>,
    kind: u32,
    bytes: Vec<u8>,
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// A GGUF version 3 file of `meta` and `tensors`, tensor data aligned to 32 bytes.
fn gguf_bytes(meta: &[(&str, Meta)], tensors: &[Raw]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((meta.len() as u64).to_le_bytes());
    for (key, value) in meta {
        put_string(&mut out, key);
        match value {
            Meta::U32(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::F32(v) => {
                out.extend(6u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::Text(s) => {
                out.extend(8u32.to_le_bytes());
                put_string(&mut out, s);
            }
            Meta::Texts(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for item in items {
                    put_string(&mut out, item);
                }
            }
            Meta::I32s(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(5u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for item in items {
                    out.extend(item.to_le_bytes());
                }
            }
        }
    }
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for tensor in tensors {
        offsets.push(offset);
        offset = (offset + tensor.bytes.len() as u64).div_ceil(32) * 32;
    }
    for (tensor, offset) in tensors.iter().zip(&offsets) {
        put_string(&mut out, &tensor.name);
        out.extend((tensor.dims.len() as u32).to_le_bytes());
        for d in &tensor.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(tensor.kind.to_le_bytes());
        out.extend(offset.to_le_bytes());
    }
    out.resize(out.len().div_ceil(32) * 32, 0);
    let data_start = out.len();
    for (tensor, offset) in tensors.iter().zip(&offsets) {
        out.resize(data_start + *offset as usize, 0);
        out.extend(&tensor.bytes);
    }
    out
}

/// A deterministic stream of numbers for the tests' values.
struct Numbers(u64);

impl Numbers {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A half float in about [-0.5, 0.5), never zero.
    fn half(&mut self) -> f16 {
        f16::from_f32((self.below(1000) as f32 - 499.5) / 1000.0)
    }
}

/// One encoded tensor of `elements` elements in `kind` and the values the format
/// defines for it, computed here from the numbers chosen (not by decoding the bytes).
fn encode(kind: &str, elements: usize, numbers: &mut Numbers) -> (u32, Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::new();
    let mut values = Vec::new();
    match kind {
        "F32" => {
            for _ in 0..elements {
                let v = numbers.half().to_f32() * 3.0;
                bytes.extend(v.to_le_bytes());
                values.push(v);
            }
            return (0, bytes, values);
        }
        "F16" => {
            for _ in 0..elements {
                let v = numbers.half();
                bytes.extend(v.to_le_bytes());
                values.push(v.to_f32());
            }
            return (1, bytes, values);
        }
        "BF16" => {
            for _ in 0..elements {
                let v = half::bf16::from_f32(numbers.half().to_f32());
                bytes.extend(v.to_le_bytes());
                values.push(v.to_f32());
            }
            return (30, bytes, values);
        }
        _ => {}
    }
    let blocks = elements / if kind.ends_with("_K") { 256 } else { 32 };
    for _ in 0..blocks {
        match kind {
            "Q4_0" | "Q4_1" | "Q8_0" => {
                let d = numbers.half();
                let m = numbers.half();
                bytes.extend(d.to_le_bytes());
                if kind == "Q4_1" {
                    bytes.extend(m.to_le_bytes());
                }
                if kind == "Q8_0" {
                    for _ in 0..32 {
                        let q = numbers.below(256) as u8 as i8;
                        bytes.push(q as u8);
                        values.push(f32::from(q) * d.to_f32());
                    }
                    continue;
                }
                let q: Vec<u8> = (0..32).map(|_| numbers.below(16) as u8).collect();
                // Element j < 16 in the low nibble of byte j, element j + 16 in its high one.
                for j in 0..16 {
                    bytes.push(q[j] | (q[j + 16] << 4));
                }
                for &q in &q {
                    values.push(if kind == "Q4_0" {
                        (f32::from(q) - 8.0) * d.to_f32()
                    } else {
                        f32::from(q) * d.to_f32() + m.to_f32()
                    });
                }
            }
            "Q4_K" => {
                let (d, dmin) = (numbers.half(), numbers.half());
                let scales: Vec<u8> = (0..8).map(|_| numbers.below(64) as u8).collect();
                let mins: Vec<u8> = (0..8).map(|_| numbers.below(64) as u8).collect();
                bytes.extend(d.to_le_bytes());
                bytes.extend(dmin.to_le_bytes());
                // Sub-blocks 0-3: 6 bits in bytes 0-3 (scales) and 4-7 (mins); 4-7: low
                // nibbles in bytes 8-11, top two bits in the high bits of bytes 0-7.
                let mut packed = [0u8; 12];
                for j in 0..4 {
                    packed[j] = scales[j] | ((scales[j + 4] >> 4) << 6);
                    packed[j + 4] = mins[j] | ((mins[j + 4] >> 4) << 6);
                    packed[j + 8] = (scales[j + 4] & 15) | ((mins[j + 4] & 15) << 4);
                }
                bytes.extend(packed);
                let q: Vec<u8> = (0..256).map(|_| numbers.below(16) as u8).collect();
                // Chunk c of 64: sub-block 2c in the low nibbles, 2c + 1 in the high.
                for c in 0..4 {
                    for l in 0..32 {
                        bytes.push(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
                    }
                }
                for (i, &q) in q.iter().enumerate() {
                    let sub = i / 32;
                    let scale = d.to_f32() * f32::from(scales[sub]);
                    let min = dmin.to_f32() * f32::from(mins[sub]);
                    values.push(scale * f32::from(q) - min);
                }
            }
            "Q6_K" => {
                let q: Vec<u8> = (0..256).map(|_| numbers.below(64) as u8).collect();
                let scales: Vec<i8> = (0..16).map(|_| numbers.below(256) as u8 as i8).collect();
                let d = numbers.half();
                let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
                // In each half of 128, value l + 32 i: low nibble of ql[l] (i = 0),
                // ql[l + 32] (1), high nibble of ql[l] (2), of ql[l + 32] (3); high two
                // bits at bit 2 i of qh[l].
                for half in 0..2 {
                    for i in 0..4 {
                        for l in 0..32 {
                            let v = q[128 * half + 32 * i + l];
                            let byte = 64 * half + l + if i % 2 == 1 { 32 } else { 0 };
                            ql[byte] |= (v & 15) << if i >= 2 { 4 } else { 0 };
                            qh[32 * half + l] |= (v >> 4) << (2 * i);
                        }
                    }
                }
                bytes.extend(ql);
                bytes.extend(qh);
                bytes.extend(scales.iter().map(|&s| s as u8));
                bytes.extend(d.to_le_bytes());
                for (k, &q) in q.iter().enumerate() {
                    let scale = scales[k / 16];
                    values.push(d.to_f32() * f32::from(scale) * (i32::from(q) - 32) as f32);
                }
            }
            other => panic!("no encoder for {other}"),
        }
    }
    let id = match kind {
        "Q4_0" => 2,
        "Q4_1" => 3,
        "Q8_0" => 8,
        "Q4_K" => 12,
        _ => 14,
    };
    (id, bytes, values)
}

/// llama.cpp's permutation of a q/k projection of `heads` heads, over `rows` rows of
/// equal length (values, or the bytes of whole blocks): row `t * half + j` of a head is
/// stored as row `2 j + t`.
fn permute<T: Copy + Default>(items: &[T], heads: usize, rows: usize) -> Vec<T> {
    let row = items.len() / rows;
    let (width, half) = (rows / heads, rows / heads / 2);
    let mut out = vec![T::default(); items.len()];
    for h in 0..heads {
        for j in 0..half {
            for t in 0..2 {
                let from = h * width + t * half + j;
                let to = h * width + 2 * j + t;
                out[to * row..(to + 1) * row].copy_from_slice(&items[from * row..(from + 1) * row]);
            }
        }
    }
    out
}

const WIDTH: usize = 256;
const FFN: usize = 512;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const LAYERS: usize = 2;

/// A byte-level vocabulary: three control tokens, the 256 byte symbols, two merges.
fn vocabulary() -> (Vec<String>, Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(str::to_owned)
        .to_vec();
    let mut types = vec![3; 3];
    // GPT-2's byte-to-symbol map: printable bytes stand for themselves, the others
    // become 256 + n in order.
    let mut shifted = 0;
    for byte in 0u32..256 {
        let printable = (33..=126).contains(&byte)
            || (161..=172).contains(&byte)
            || (174..=255).contains(&byte);
        let symbol = if printable {
            char::from_u32(byte).unwrap()
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).unwrap()
        };
        tokens.push(symbol.to_string());
        types.push(1);
    }
    tokens.push("he".into());
    tokens.push("hel".into());
    types.extend([1, 1]);
    (tokens, vec!["h e".into(), "he l".into()], types)
}

/// A two-layer Llama of width 256 in GGUF: every weight of a layer in another type (all
/// eight supported types appear), q and k permuted as llama.cpp stores them. Returns the
/// file and the values transformers' tensors must hold.
fn llama_gguf() -> (Vec<u8>, BTreeMap<String, Vec<f32>>) {
    let (tokens, merges, types) = vocabulary();
    let vocab = tokens.len();
    let meta = vec![
        ("general.architecture", Meta::Text("llama".into())),
        ("llama.block_count", Meta::U32(LAYERS as u32)),
        ("llama.embedding_length", Meta::U32(WIDTH as u32)),
        ("llama.feed_forward_length", Meta::U32(FFN as u32)),
        ("llama.attention.head_count", Meta::U32(HEADS as u32)),
        ("llama.attention.head_count_kv", Meta::U32(KV_HEADS as u32)),
        ("llama.rope.freq_base", Meta::F32(100_000.0)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
        ("llama.context_length", Meta::U32(512)),
        (
            "llama.rope.dimension_count",
            Meta::U32((WIDTH / HEADS) as u32),
        ),
        ("tokenizer.ggml.model", Meta::Text("gpt2".into())),
        ("tokenizer.ggml.pre", Meta::Text("smollm".into())),
        ("tokenizer.ggml.tokens", Meta::Texts(tokens)),
        ("tokenizer.ggml.merges", Meta::Texts(merges)),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ("tokenizer.ggml.bos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(2)),
        (
            "tokenizer.chat_template",
            Meta::Text("{{ messages }}".into()),
        ),
    ];
    let mut numbers = Numbers(7);
    let mut tensors = Vec::new();
    let mut expected = BTreeMap::new();
    let kv = WIDTH / HEADS * KV_HEADS;
    let mut add =
        |gguf: &str, hf: &str, kind: &str, rows: usize, columns: usize, heads: Option<usize>| {
            let (id, bytes, values) = encode(kind, rows * columns, &mut numbers);
            let dims = if rows == 1 {
                vec![columns as u64]
            } else {
                vec![columns as u64, rows as u64]
            };
            // The file holds the permuted rows; transformers' tensor the original ones.
            let bytes = match heads {
                Some(heads) => permute(&bytes, heads, rows),
                None => bytes,
            };
            tensors.push(Raw {
                name: gguf.into(),
                dims,
                kind: id,
                bytes,
            });
            expected.insert(hf.to_owned(), values);
        };
    add(
        "token_embd.weight",
        "model.embed_tokens.weight",
        "Q8_0",
        vocab,
        WIDTH,
        None,
    );
    add(
        "output_norm.weight",
        "model.norm.weight",
        "F32",
        1,
        WIDTH,
        None,
    );
    // Every type in both layers' seven projections, q and k among them.
    let kinds = [
        ["F32", "BF16", "F16", "Q4_0", "Q4_1", "Q8_0", "Q4_K"],
        ["Q6_K", "Q4_K", "Q8_0", "Q6_K", "Q4_0", "BF16", "Q4_1"],
    ];
    for (layer, kinds) in kinds.iter().enumerate() {
        let hf = |m: &str| format!("model.layers.{layer}.{m}.weight");
        let gg = |m: &str| format!("blk.{layer}.{m}.weight");
        add(
            &gg("attn_norm"),
            &hf("input_layernorm"),
            "F32",
            1,
            WIDTH,
            None,
        );
        add(
            &gg("ffn_norm"),
            &hf("post_attention_layernorm"),
            "F32",
            1,
            WIDTH,
            None,
        );
        add(
            &gg("attn_q"),
            &hf("self_attn.q_proj"),
            kinds[0],
            WIDTH,
            WIDTH,
            Some(HEADS),
        );
        add(
            &gg("attn_k"),
            &hf("self_attn.k_proj"),
            kinds[1],
            kv,
            WIDTH,
            Some(KV_HEADS),
        );
        add(
            &gg("attn_v"),
            &hf("self_attn.v_proj"),
            kinds[2],
            kv,
            WIDTH,
            None,
        );
        add(
            &gg("attn_output"),
            &hf("self_attn.o_proj"),
            kinds[3],
            WIDTH,
            WIDTH,
            None,
        );
        add(
            &gg("ffn_gate"),
            &hf("mlp.gate_proj"),
            kinds[4],
            FFN,
            WIDTH,
            None,
        );
        add(
            &gg("ffn_up"),
            &hf("mlp.up_proj"),
            kinds[5],
            FFN,
            WIDTH,
            None,
        );
        add(
            &gg("ffn_down"),
            &hf("mlp.down_proj"),
            kinds[6],
            WIDTH,
            FFN,
            None,
        );
    }
    (gguf_bytes(&meta, &tensors), expected)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sage-import-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn import_bytes(bytes: &[u8], dir: &Path) -> Result<(), ImportError> {
    let file = dir.join("model.gguf");
    std::fs::write(&file, bytes).unwrap();
    import_gguf(&file, &dir.join("out"), Dtype::F32, &mut |_| {}).map(|_| ())
}

#[test]
fn every_type_dequantizes_to_the_formats_values_and_q_k_rows_are_unpermuted() {
    let dir = temp_dir("llama");
    let (bytes, expected) = llama_gguf();
    import_bytes(&bytes, &dir).unwrap();
    let out = dir.join("out");
    let tensors = read_safetensors(&out.join("model.safetensors")).unwrap();
    assert_eq!(tensors.len(), expected.len(), "{:?}", tensors.keys());
    for (name, values) in &expected {
        let tensor = &tensors[name];
        assert_eq!(tensor.data.len(), values.len(), "{name}");
        // Bit for bit: the same f32 arithmetic the format defines.
        let differing = tensor
            .data
            .iter()
            .zip(values)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(differing, 0, "{name}: {differing} values differ");
    }
    assert_eq!(
        tensors["model.layers.0.self_attn.k_proj.weight"].shape,
        vec![128, WIDTH]
    );
    assert_eq!(
        tensors["model.layers.1.mlp.down_proj.weight"].shape,
        vec![WIDTH, FFN]
    );

    let config = read_config(&out.join("config.json")).unwrap();
    assert_eq!(
        (
            config.num_hidden_layers,
            config.hidden_size,
            config.num_attention_heads
        ),
        (LAYERS, WIDTH, HEADS)
    );
    assert_eq!(config.num_key_value_heads, KV_HEADS);
    assert_eq!((config.rope_theta, config.rms_norm_eps), (100_000.0, 1e-5));
    assert!(config.tie_word_embeddings && !config.qkv_bias);
    let mut k = CpuBackend::new();
    load_model(&mut k, &out).expect("the imported model loads");

    // SmolLM's pre-tokenizer: every digit its own token; the merges apply.
    let tokenizer = Tokenizer::from_dir(&out).expect("tokenizer.json loads");
    let ids = tokenizer.encode("hel 42").unwrap();
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| tokenizer.id_to_token(id).unwrap())
        .collect();
    assert_eq!(pieces, ["hel", "Ġ", "4", "2"]);
    assert_eq!(tokenizer.decode(&ids).unwrap(), "hel 42");
    let config_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tokenizer_config.json")).unwrap())
            .unwrap();
    assert_eq!(config_json["chat_template"], "{{ messages }}");
    assert_eq!(config_json["eos_token"], "<|im_end|>");
    let model_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        (
            model_json["bos_token_id"].clone(),
            model_json["eos_token_id"].clone()
        ),
        (1.into(), 2.into())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn malformed_files_name_the_problem_and_write_nothing() {
    let dir = temp_dir("bad");
    let (bytes, _) = llama_gguf();
    // Truncated anywhere: an error, never a panic, and no model directory.
    for cut in [0, 3, 10, 40, 300, bytes.len() / 2, bytes.len() - 1] {
        let error = import_bytes(&bytes[..cut], &dir).unwrap_err().to_string();
        assert!(
            error.contains("truncated")
                || error.contains("ends inside")
                || error.contains("not a GGUF"),
            "cut at {cut}: {error}"
        );
        assert!(!dir.join("out/config.json").exists());
    }
    let mut magic = bytes.clone();
    magic[0] = b'X';
    assert!(import_bytes(&magic, &dir)
        .unwrap_err()
        .to_string()
        .contains("not a GGUF file"));

    // An unsupported type (Q5_0) names the tensor and the type.
    let mut numbers = Numbers(1);
    let (_, q8, _) = encode("Q8_0", 32, &mut numbers);
    let meta = vec![("general.architecture", Meta::Text("llama".into()))];
    let tensor = |kind| Raw {
        name: "blk.0.ffn_up.weight".into(),
        dims: vec![32],
        kind,
        bytes: q8.clone(),
    };
    let error = import_bytes(&gguf_bytes(&meta, &[tensor(6)]), &dir)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("blk.0.ffn_up.weight") && error.contains("GGML type 6"),
        "{error}"
    );
    // Rows that are not whole blocks.
    let odd = Raw {
        name: "output_norm.weight".into(),
        dims: vec![30],
        kind: 8,
        bytes: q8.clone(),
    };
    let error = import_bytes(&gguf_bytes(&meta, &[odd]), &dir)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("output_norm.weight") && error.contains("whole blocks"),
        "{error}"
    );
    // Another architecture.
    let other = vec![("general.architecture", Meta::Text("mamba".into()))];
    let error = import_bytes(&gguf_bytes(&other, &[tensor(8)]), &dir)
        .unwrap_err()
        .to_string();
    assert!(error.contains("\"mamba\""), "{error}");
    // A tensor no Llama has.
    let (mut bytes, _) = llama_gguf();
    let needle = b"blk.1.ffn_gate.weight";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    bytes[at..at + needle.len()].copy_from_slice(b"blk.1.ffn_xxxx.weight");
    let error = import_bytes(&bytes, &dir).unwrap_err().to_string();
    assert!(error.contains("blk.1.ffn_xxxx.weight"), "{error}");
    // An existing model directory is not overwritten.
    let (good, _) = llama_gguf();
    import_bytes(&good, &dir).unwrap();
    let error = import_bytes(&good, &dir).unwrap_err().to_string();
    assert!(error.contains("already holds a model"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The real SmolLM2-135M-Instruct (Q4_1, `SAGE_SMOLLM2_GGUF=path`; CI downloads it):
/// its values equal those llama.cpp's own reader (`gguf-py`, `dequantize`, then the
/// converter's q/k permutation undone) gives, its tokens and logits those transformers
/// computes from the imported directory, and it completes a sentence sensibly.
#[test]
fn smollm2_imports_with_llama_cpps_values_and_answers() {
    use sage_core::policy::SamplingParams;
    use sage_core::Policy;
    use sage_trainer::policy::TransformerPolicy;

    let Some(gguf) = std::env::var_os("SAGE_SMOLLM2_GGUF") else {
        eprintln!("SAGE_SMOLLM2_GGUF is not set: the real model's import is not checked");
        return;
    };
    let dir = temp_dir("smollm2");
    let out = dir.join("out");
    let summary = import_gguf(Path::new(&gguf), &out, Dtype::F32, &mut |_| {}).unwrap();
    let config = &summary.config;
    assert_eq!(
        (
            config.num_hidden_layers,
            config.hidden_size,
            config.vocab_size
        ),
        (30, 576, 49_152)
    );
    assert_eq!(
        (config.num_attention_heads, config.num_key_value_heads),
        (9, 3)
    );
    assert!(config.tie_word_embeddings);
    let tensors = read_safetensors(&out.join("model.safetensors")).unwrap();
    // (tensor, its first three values, the first three of its second row, the sum of
    // all its values), from gguf-py.
    let recorded: [(&str, [f64; 3], [f64; 3], f64); 4] = [
        (
            "model.embed_tokens.weight",
            [
                -0.10654449462890625,
                0.032978057861328125,
                0.048198699951171875,
            ],
            [-0.0238037109375, -0.015869140625, -0.0396728515625],
            -15353.04449415207,
        ),
        (
            "model.layers.0.mlp.down_proj.weight",
            [-0.330810546875, 0.3460693359375, 0.0753173828125],
            [0.17236328125, -0.1959228515625, 0.0145263671875],
            150.63577270507812,
        ),
        (
            "model.layers.3.self_attn.k_proj.weight",
            [0.1629638671875, 0.06451416015625, 0.015289306640625],
            [0.05596923828125, -0.123779296875, -0.01593017578125],
            -52.82200622558594,
        ),
        (
            "model.layers.29.self_attn.q_proj.weight",
            [0.261962890625, -0.065673828125, -0.02471923828125],
            [0.267791748046875, -0.075927734375, 0.21868896484375],
            191.08612442016602,
        ),
    ];
    for (name, first, second, sum) in recorded {
        let tensor = &tensors[name];
        let columns = tensor.shape[1];
        // Every recorded value is an f32, written out exactly.
        let exact = |values: &[f32]| values.iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
        assert_eq!(exact(&tensor.data[..3]), first, "{name}");
        assert_eq!(exact(&tensor.data[columns..columns + 3]), second, "{name}");
        let total: f64 = tensor.data.iter().map(|&v| f64::from(v)).sum();
        assert!(
            (total - sum).abs() < 1e-3,
            "{name}: sum {total}, gguf-py {sum}"
        );
    }

    let tokenizer = Tokenizer::from_dir(&out).unwrap();
    let mut k = CpuBackend::new();
    let mut model = load_model(&mut k, &out).unwrap();
    // Recorded from transformers 4.44.2 (tokenizers 0.19.1, PyTorch 1.13, f32) on this
    // directory: the ids of each text, the logits of the first and last position (their
    // first three entries) and the last position's three likeliest tokens.
    type Recorded = (&'static str, &'static [u32], [f64; 3], [f64; 3], [u32; 3]);
    let transformers: [Recorded; 3] = [
        (
            "The capital of France is",
            &[504, 3575, 282, 4649, 314],
            [15.65527057647705, 6.824519634246826, 10.591263771057129],
            [1.6136491298675537, -11.871877670288086, -7.944445610046387],
            [7042, 260, 4528],
        ),
        (
            "def add(a, b):\n    return",
            &[1604, 803, 24, 81, 28, 278, 727, 472, 1003],
            [15.781514167785645, 7.124183177947998, 10.813345909118652],
            [5.37355899810791, -3.3658864498138428, -1.2560819387435913],
            [253, 2822, 365],
        ),
        (
            "Alice paid 42 dollars on 2024-05-28.",
            &[
                7356, 5940, 216, 36, 34, 8358, 335, 216, 34, 32, 34, 36, 29, 32, 37, 29, 34, 40, 30,
            ],
            [14.117447853088379, 4.508028030395508, 7.664285659790039],
            [6.598431587219238, 7.890294075012207, 15.204619407653809],
            [198, 378, 669],
        ),
    ];
    // Summation order differs over 30 layers: within 1e-3 of each logit's size.
    let close = |ours: &[f32], torch: &[f64; 3]| {
        ours.iter()
            .zip(torch)
            .all(|(&a, &b)| (f64::from(a) - b).abs() <= 1e-3 * b.abs().max(1.0))
    };
    for (text, ids, first, last, top) in transformers {
        assert_eq!(tokenizer.encode(text).unwrap(), ids, "{text:?}");
        let mut cache = KvCache::new(&mut k, &model, 1, ids.len()).unwrap();
        let logits = model.prefill(&mut k, &mut cache, &[&ids[..1]]).unwrap();
        assert!(
            close(&logits[..3], &first),
            "{text:?} first: {:?}",
            &logits[..3]
        );
        let logits = model.prefill(&mut k, &mut cache, &[ids]).unwrap();
        assert!(
            close(&logits[..3], &last),
            "{text:?} last: {:?}",
            &logits[..3]
        );
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        assert_eq!(order[..3], top, "{text:?}");
        cache.free(&mut k).unwrap();
    }

    let mut policy = TransformerPolicy::inference(k, model);
    let prompt = tokenizer.encode("The capital of France is").unwrap();
    let params = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 4,
        ..SamplingParams::default()
    };
    let generation = policy.generate(&[&prompt], &params).unwrap();
    let text = tokenizer.decode(&generation[0].tokens).unwrap();
    assert!(text.contains("Paris"), "{text:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
