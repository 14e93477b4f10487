//! In-band execution driven by forced tokens (no trained weights exist here): the code
//! regions a "model" writes are run in the chip and their results injected; Qwen's own
//! caches and states end exactly as in the same generation with the VM never run.

use inband_host_runtime::inband::{Executor, Region};
use inband_host_runtime::text::{Generation, Sampling, TextModel};
use inband_host_runtime::vm::Device;
use inband_model_surgery::synth::{synth, SynthOptions};
use inband_qwen35::presets::Shape;
use inband_tests::rv32_chip;

const FORCED: &str = "Let me compute that: [C: 847*293] and run a program:\n```c\n#include <stdio.h>\n\
int main(void) { printf(\"%d\\n\", 6 * 7); return 0; }\n```\nAnd [C: nope] fails.";

/// Qwen's caches and recurrent states, bit for bit.
fn assert_same_state(model: &TextModel, x: &Generation, y: &Generation) {
    let (a, b) = (
        model.model.state_numbers(&x.state).unwrap(),
        model.model.state_numbers(&y.state).unwrap(),
    );
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
            "state tensor {i} differs"
        );
    }
}

/// `INBAND_{name}_DEVICE` (cpu by default): a CUDA build of this test runs there.
fn device(name: &str) -> Device {
    std::env::var(format!("INBAND_{name}_DEVICE"))
        .map_or(Ok(Device::Cpu), |d| Device::parse(&d))
        .unwrap()
}

#[test]
fn code_regions_run_in_the_chip_and_qwen_state_is_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tiny");
    let options = SynthOptions {
        shape: Shape::Tiny,
        seed: 3,
        text_only: false,
    };
    synth(&options, &dir, &mut |_, _| {}).unwrap();
    let mut model = TextModel::open(&dir, device("TEXT")).unwrap();
    model.all_logits = true;
    let chip = rv32_chip(Shape::Tiny);
    let executor = Executor {
        chip: &chip,
        device: device("VM"),
        toolchain: inband_firmware::Toolchain::locate(None).ok(),
        limits: inband_host_runtime::vm::Limits::instructions(100_000),
        max_output: 2048,
        report: false,
        resident: Default::default(),
    };
    let prompt = model.encode("Question: what is 847 times 293?").unwrap();
    let forced = model.encode_forced(FORCED).unwrap();
    let mut sink = Vec::new();

    // Two generations in one process, each region with a fresh VM: the same results.
    let first = model
        .generate(&prompt, &forced, 3, Sampling::Greedy, Some(&executor), &mut sink)
        .unwrap();
    let second = model
        .generate(&prompt, &forced, 3, Sampling::Greedy, Some(&executor), &mut sink)
        .unwrap();
    assert_eq!(first.ids, second.ids);

    let text = model.decode(&first.ids[prompt.len()..]).unwrap();
    assert!(text.contains("[C: 847*293] = 248171 and run"), "{text}");
    assert!(text.contains("return 0; }\n```\n```output\n42\n```\n\nAnd"), "{text}");
    assert!(text.contains("[C: nope] = compile error: 'nope' undeclared"), "{text}");
    let regions: Vec<&Region> = first.executions.iter().map(|(r, _)| r).collect();
    assert_eq!(regions.len(), 3);
    assert_eq!(regions[0], &Region::Expression("847*293".into()));
    assert!(first.executions[0].1.instructions > 0);

    // The same token stream with the VM never run: identical logits and Qwen state.
    let continuation = first.ids[prompt.len()..].to_vec();
    let replay = model
        .generate(&prompt, &continuation, 0, Sampling::Greedy, None, &mut sink)
        .unwrap();
    assert_eq!(replay.ids, first.ids);
    assert!(replay.executions.is_empty());
    assert_eq!(replay.rows, first.rows, "logits differ");
    assert_eq!(replay.state.position(), first.state.position());
    assert_same_state(&model, &first, &replay);

    // The vocabulary projection only where a choice reads it: the same choices and bits.
    model.all_logits = false;
    let lean = model
        .generate(&prompt, &forced, 3, Sampling::Greedy, Some(&executor), &mut sink)
        .unwrap();
    assert_eq!(lean.ids, first.ids);
    assert_eq!(lean.rows.last(), first.rows.last(), "the last logits differ");
    assert!(lean.rows.len() < first.rows.len());
    assert_same_state(&model, &first, &lean);
}
