//! Tool schemas built to exhaust a schema compiler, for the tests that send them: each is a
//! whole `parameters` object whose property `v` leads into the bomb.

use serde_json::{json, Map, Value};

/// `a0 → a1 → … → a{n}`, each a `$ref` to the next.
pub fn ref_chain(n: usize) -> Value {
    let mut defs = Map::new();
    for i in 0..n {
        defs.insert(
            format!("a{i}"),
            json!({"$ref": format!("#/$defs/a{}", i + 1)}),
        );
    }
    defs.insert(format!("a{n}"), json!({"type": "string"}));
    json!({"type": "object", "$defs": defs, "properties": {"v": {"$ref": "#/$defs/a0"}}})
}

/// `n0 → n1 → … → n{n-1} → n0`.
pub fn ref_cycle(n: usize) -> Value {
    let mut defs = Map::new();
    for i in 0..n {
        defs.insert(
            format!("n{i}"),
            json!({"$ref": format!("#/$defs/n{}", (i + 1) % n)}),
        );
    }
    json!({"type": "object", "$defs": defs, "properties": {"v": {"$ref": "#/$defs/n0"}}})
}

/// Each level an `anyOf` of `width` refs to the next: `width^levels` once expanded.
pub fn fan_out(width: usize, levels: usize) -> Value {
    let mut defs = Map::new();
    for i in 0..levels {
        let next = json!({"$ref": format!("#/$defs/l{}", i + 1)});
        defs.insert(format!("l{i}"), json!({"anyOf": vec![next; width]}));
    }
    defs.insert(format!("l{levels}"), json!({"type": "string"}));
    json!({"type": "object", "$defs": defs, "properties": {"v": {"$ref": "#/$defs/l0"}}})
}
