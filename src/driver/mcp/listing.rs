//! A server's tool list, page by page, within bounds: a server that pages forever, or whose
//! pages are huge, ends the listing with an error instead of filling memory. The bounds sit far
//! past what one request may declare (128 tools), so no honest server meets them.

use rmcp::model::{PaginatedRequestParams, Tool};

use super::tool::Session;

/// Pages followed at most.
const MAX_PAGES: usize = 32;
/// Tools kept at most, and the bytes their definitions may take together.
const MAX_TOOLS: usize = 4096;
const MAX_BYTES: usize = 32 * 1024 * 1024;

/// The tools, and how long the list is fresh (`ttlMs`, the shortest of its pages'; none when a
/// page gave none).
pub struct Listing {
    pub tools: Vec<Tool>,
    pub ttl_ms: Option<u64>,
}

pub async fn all_tools(session: &Session) -> Result<Listing, String> {
    let mut listing = Listing {
        tools: Vec::new(),
        ttl_ms: Some(u64::MAX),
    };
    let mut bytes = 0;
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let page = session
            .list_tools(Some(params))
            .await
            .map_err(|e| e.to_string())?;
        listing.ttl_ms = listing.ttl_ms.zip(page.ttl_ms).map(|(a, b)| a.min(b));
        bytes += page
            .tools
            .iter()
            .map(|tool| serde_json::to_vec(tool).map_or(0, |json| json.len()))
            .sum::<usize>();
        listing.tools.extend(page.tools);
        if listing.tools.len() > MAX_TOOLS || bytes > MAX_BYTES {
            return Err(format!(
                "its tool list passed {MAX_TOOLS} tools or {} MiB",
                MAX_BYTES >> 20
            ));
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(listing),
        }
    }
    Err(format!("its tool list ran past {MAX_PAGES} pages"))
}
