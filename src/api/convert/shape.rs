//! The request's shape: the ranges and lengths `validator` checks on each field, and the bounds
//! on lists it cannot check.

use validator::{Validate, ValidationError, ValidationErrors, ValidationErrorsKind};

use crate::api::request::{wire_name, ReactStepRequest, MAX_CONTEXT_ITEMS, MAX_TOOLS};
use crate::api::response::FieldError;

/// Every field out of its shape or range, in `validator`'s order, then the lists over their
/// bounds.
pub fn check(req: &ReactStepRequest) -> Vec<FieldError> {
    let mut fields = Vec::new();
    if let Err(errors) = req.validate() {
        flatten("", &errors, &mut fields);
    }
    list_bounds(req, &mut fields);
    fields
}

/// Whether a top-level list is over its length bound: a certain 400.
pub fn has_list_over_bound(fields: &[FieldError]) -> bool {
    fields.iter().any(|f| is_list_bound(&f.field, &f.message))
}

/// The bounds on lists that validator's length rule cannot check (it needs Serialize items).
fn list_bounds(req: &ReactStepRequest, fields: &mut Vec<FieldError>) {
    let counted = [
        (
            "vector_search_results_to_include",
            req.vector_search_results_to_include.len(),
            MAX_CONTEXT_ITEMS,
        ),
        (
            "explicit_context",
            req.explicit_context.len(),
            MAX_CONTEXT_ITEMS,
        ),
        ("pinned_items", req.pinned_items.len(), MAX_CONTEXT_ITEMS),
        ("tools", req.tools.as_ref().map_or(0, Vec::len), MAX_TOOLS),
    ];
    for (field, len, max) in counted {
        if len as u64 > max {
            fields.push(FieldError {
                field: field.into(),
                message: format!("length must be at most {max}"),
            });
        }
    }
}

/// Whether a field error is a top-level list over its length bound.
fn is_list_bound(field: &str, message: &str) -> bool {
    const LISTS: [&str; 8] = [
        "conversation_history",
        "explicit_context_paths",
        "pinned_item_ids_to_include",
        "vector_search_results_to_include",
        "explicit_context",
        "pinned_items",
        "context_priority",
        "tools",
    ];
    LISTS.contains(&field) && message.starts_with("length must be at most")
}

/// Validator's nested errors as `a.b[2].c` paths with the client's field names.
fn flatten(prefix: &str, errors: &ValidationErrors, out: &mut Vec<FieldError>) {
    for (field, kind) in errors.errors() {
        let path = match (prefix.is_empty(), field.as_ref()) {
            (_, "__all__") => prefix.to_string(),
            (true, f) => wire_name(f).to_string(),
            (false, f) => format!("{prefix}.{}", wire_name(f)),
        };
        match kind {
            ValidationErrorsKind::Field(list) => out.extend(list.iter().map(|e| FieldError {
                field: path.clone(),
                message: describe(e),
            })),
            ValidationErrorsKind::Struct(inner) => flatten(&path, inner, out),
            ValidationErrorsKind::List(map) => {
                for (i, inner) in map {
                    flatten(&format!("{path}[{i}]"), inner, out);
                }
            }
        }
    }
}

fn describe(e: &ValidationError) -> String {
    if let Some(message) = &e.message {
        return message.to_string();
    }
    let param = |name: &str| e.params.get(name).map(|v| v.to_string());
    match (e.code.as_ref(), param("min"), param("max")) {
        ("length", Some(min), Some(max)) => format!("length must be between {min} and {max}"),
        ("length", None, Some(max)) => format!("length must be at most {max}"),
        ("length", Some(min), None) => format!("length must be at least {min}"),
        ("range", Some(min), Some(max)) => format!("must be between {min} and {max}"),
        ("range", Some(min), None) => format!("must be at least {min}"),
        ("range", None, Some(max)) => format!("must be at most {max}"),
        (code, _, _) => format!("is invalid ({code})"),
    }
}
