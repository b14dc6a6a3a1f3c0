//! The context: the sources' order, and the candidate items from the explicit files, the pinned
//! items, the last focused file and the search hits.

use std::collections::HashSet;

use crate::api::request::ReactStepRequest;
use crate::step::{dedupe, path_key, same_path, ContextItem, ContextSource, Excluded, Fate};

/// `context_priority`: each source at most once.
pub fn priority(
    order: Option<Vec<ContextSource>>,
    fail: &mut impl FnMut(&str, String),
) -> Vec<ContextSource> {
    let order = order.unwrap_or_default();
    if order
        .iter()
        .enumerate()
        .any(|(i, s)| order[..i].contains(s))
    {
        fail(
            "context_priority",
            "must name each source at most once".into(),
        );
    }
    order
}

/// The request's context, taken from it: the candidate items and those named without content.
pub fn items(req: &mut ReactStepRequest) -> (Vec<ContextItem>, Vec<Excluded>) {
    context_items(
        std::mem::take(&mut req.explicit_context_paths),
        std::mem::take(&mut req.explicit_context)
            .into_iter()
            .map(|f| (f.path, f.content)),
        std::mem::take(&mut req.pinned_item_ids_to_include),
        std::mem::take(&mut req.pinned_items)
            .into_iter()
            .map(|p| (p.id, p.content, p.path)),
        req.implicit_context.take().map(|c| {
            (
                c.last_focused_file_path,
                c.last_focused_file_content,
                c.cursor_line,
            )
        }),
        std::mem::take(&mut req.vector_search_results_to_include)
            .into_iter()
            .map(|mut v| {
                // A block's blank lines at its end are not shown: its lines end at its text's.
                let shown = v.content.trim_end_matches('\n').len();
                v.content.truncate((shown + 1).min(v.content.len()));
                if shown == 0 {
                    v.content.clear();
                }
                SearchHit {
                    lines: lines_held(v.start_line, v.end_line, &v.content),
                    path: v.path,
                    content: v.content,
                    score: v.score,
                }
            }),
    )
}

/// The lines a hit's content holds, counted from `start_line` (back from `end_line` when only it
/// is given): a heading never claims lines the content does not hold, and a hit with one end is
/// not taken for the whole file.
fn lines_held(start: Option<u32>, end: Option<u32>, content: &str) -> Option<(u32, u32)> {
    let after_first = u32::try_from(content.split_inclusive('\n').count())
        .unwrap_or(u32::MAX)
        .saturating_sub(1);
    let start = match (start, end) {
        (Some(start), _) => start,
        (None, Some(end)) => end.saturating_sub(after_first).max(1),
        (None, None) => return None,
    };
    Some((start, start.saturating_add(after_first)))
}

struct SearchHit {
    path: Option<String>,
    content: String,
    score: Option<f64>,
    lines: Option<(u32, u32)>,
}

/// The candidate items in priority order (explicit, pinned, implicit, search hits by score), and
/// the ones named without content.
fn context_items(
    explicit_paths: Vec<String>,
    explicit: impl Iterator<Item = (String, String)>,
    pinned_ids: Vec<String>,
    pinned: impl Iterator<Item = (String, String, Option<String>)>,
    implicit: Option<(Option<String>, Option<String>, Option<u32>)>,
    hits: impl Iterator<Item = SearchHit>,
) -> (Vec<ContextItem>, Vec<Excluded>) {
    let mut items = Vec::new();
    let mut unresolved = Vec::new();
    let item = |source, id: String, path: Option<String>, content| ContextItem {
        source,
        id,
        path,
        content,
        score: None,
        lines: None,
        cursor_line: None,
    };

    let explicit = explicit.map(|(p, c)| item(ContextSource::Explicit, p.clone(), Some(p), c));
    named_items(
        ContextSource::Explicit,
        explicit_paths,
        explicit.collect(),
        &mut items,
        &mut unresolved,
    );
    let pinned = pinned.map(|(i, c, p)| item(ContextSource::Pinned, i, p, c));
    named_items(
        ContextSource::Pinned,
        pinned_ids,
        pinned.collect(),
        &mut items,
        &mut unresolved,
    );

    match implicit {
        Some((path, Some(content), cursor_line)) => {
            let id = path.clone().unwrap_or_else(|| "(last focused file)".into());
            items.push(ContextItem {
                cursor_line,
                ..item(ContextSource::Implicit, id, path, content)
            });
        }
        Some((Some(path), None, cursor_line)) => unresolved.push(Excluded {
            cursor_line,
            ..missing(ContextSource::Implicit, path)
        }),
        _ => {}
    }

    search_hits(hits, &mut items, &mut unresolved);
    let (items, duplicates) = dedupe(items);
    unresolved.extend(duplicates);
    (items, unresolved)
}

/// The search hits, by score: named by their place in the request when they have no path; an
/// empty one is left out.
fn search_hits(
    hits: impl Iterator<Item = SearchHit>,
    items: &mut Vec<ContextItem>,
    unresolved: &mut Vec<Excluded>,
) {
    let mut hits: Vec<(usize, SearchHit)> = hits.enumerate().collect();
    hits.sort_by(|(_, a), (_, b)| {
        b.score
            .unwrap_or(f64::MIN)
            .total_cmp(&a.score.unwrap_or(f64::MIN))
    });
    for (i, hit) in hits {
        let id = hit
            .path
            .clone()
            .unwrap_or_else(|| format!("search result {}", i + 1));
        if hit.content.is_empty() {
            // It holds no line: nothing to send, nor to join other hits through.
            unresolved.push(Excluded::dropped(
                ContextSource::VectorSearch,
                id,
                "empty: the search result holds no text",
            ));
            continue;
        }
        items.push(ContextItem {
            source: ContextSource::VectorSearch,
            id,
            path: hit.path,
            content: hit.content,
            score: hit.score,
            lines: hit.lines,
            cursor_line: None,
        });
    }
}

/// One source's items: a name sent without content is unresolved, and an id sent or named twice
/// is kept once (the first); the later ones are reported dropped, as duplicates.
fn named_items(
    source: ContextSource,
    names: Vec<String>,
    given: Vec<ContextItem>,
    items: &mut Vec<ContextItem>,
    unresolved: &mut Vec<Excluded>,
) {
    // An explicit file is a path, however it is written; a pinned item's id is only itself.
    let key = |id: &str| match source {
        ContextSource::Explicit => path_key(id).into_owned(),
        _ => id.to_string(),
    };
    let same = |a: &str, b: &str| match source {
        ContextSource::Explicit => same_path(a, b),
        _ => a == b,
    };
    let mut named = HashSet::new();
    for name in names {
        if given.iter().any(|g| same(&g.id, &name)) {
            continue;
        }
        let name_key = key(&name);
        if named.insert(name_key) {
            unresolved.push(missing(source, name));
            continue;
        }
        // Read once from a workspace, reported once: a name given again is a duplicate.
        unresolved.push(Excluded::dropped(
            source,
            name,
            "duplicate: named again; the first mention is the one used",
        ));
    }
    let mut seen = HashSet::new();
    for item in given {
        if seen.insert(key(&item.id)) {
            items.push(item);
            continue;
        }
        let reason = format!(
            "duplicate: an earlier {} has the same id, and is the one sent",
            source.label()
        );
        unresolved.push(Excluded::dropped(source, item.id, reason));
    }
}

fn missing(source: ContextSource, id: String) -> Excluded {
    Excluded {
        source,
        id,
        fate: Fate::Unresolved,
        cursor_line: None,
        reason: "named without content; this server has no workspace to read it from, so send its content inline".into(),
    }
}
