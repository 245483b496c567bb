//! Query-side synonym expansion: a built-in table of general English words used in tool
//! requests, plus operator groups set at run time.
//!
//! Groups are symmetric: any member found in a query adds the other members as weaker
//! alternatives at the same query position. No transitive closure: "find" pulls in the
//! "get" group and the "search" group, not the groups of their members.

use std::collections::HashMap;

use super::tokenize::Analyzer;

/// General-purpose groups. Each inner list is one meaning; words are analysed (stemmed) at
/// start-up, so inflections need not be listed. Keep this free of anything specific to one
/// catalogue: it serves every deployment.
const BUILT_IN: &[&[&str]] = &[
    // reading and finding
    &[
        "get", "fetch", "retrieve", "obtain", "acquire", "lookup", "read",
    ],
    &[
        "find", "search", "lookup", "locate", "seek", "discover", "query",
    ],
    &["list", "enumerate", "show", "display", "browse"],
    &["check", "verify", "validate", "inspect", "test"],
    &[
        "analyze", "analyse", "analysis", "examine", "assess", "evaluate",
    ],
    &["info", "information", "detail", "details"],
    &["summary", "summarize", "summarise", "overview", "digest"],
    &["stats", "statistics", "metrics", "analytics"],
    &["count", "tally", "total"],
    // writing and changing
    &["create", "make", "add", "new", "insert", "register"],
    &["generate", "produce", "compose"],
    &["delete", "remove", "erase", "destroy", "purge"],
    &["update", "modify", "edit", "change", "alter", "amend"],
    &["set", "configure", "adjust"],
    &["send", "post", "submit", "transmit", "dispatch"],
    &["publish", "post", "share"],
    &["upload", "attach"],
    &["download", "export"],
    &["convert", "transform", "transcode"],
    &["translate", "translation", "translator"],
    &["calculate", "compute", "calc", "calculator"],
    &["estimate", "predict", "forecast", "projection"],
    &["save", "store", "record", "log"],
    &["cancel", "abort", "revoke"],
    &["start", "launch", "begin", "initiate", "run"],
    &["stop", "halt", "terminate", "end", "kill"],
    &["enable", "activate"],
    &["disable", "deactivate"],
    &["open", "launch"],
    &["close", "shut"],
    &[
        "schedule",
        "book",
        "reserve",
        "booking",
        "reservation",
        "appointment",
    ],
    &["remind", "reminder", "alert", "notify", "notification"],
    &["track", "monitor", "follow"],
    &["compare", "comparison", "versus", "vs"],
    &["recommend", "suggest", "recommendation", "suggestion"],
    &["login", "signin", "authenticate"],
    &["logout", "signout"],
    &["pay", "payment", "charge"],
    &["buy", "purchase", "order"],
    &["sell", "sale"],
    // time and place
    &["time", "clock", "hour"],
    &["date", "day", "calendar"],
    &["now", "current", "present", "today", "latest"],
    &[
        "location",
        "place",
        "position",
        "whereabouts",
        "coordinates",
    ],
    &["map", "directions", "route", "navigate", "navigation"],
    &["distance", "far"],
    &["address", "location"],
    // things
    &["weather", "forecast", "climate"],
    &["temperature", "temp"],
    &["price", "cost", "fee", "pricing", "rate", "quote"],
    &["money", "currency", "cash"],
    &["stock", "equity", "ticker", "shares"],
    &["email", "mail", "inbox", "e-mail"],
    &["message", "text", "sms", "msg", "chat"],
    &["call", "phone", "dial"],
    &["phone", "telephone", "mobile", "cell"],
    &["picture", "image", "photo", "photograph", "pic", "img"],
    &["video", "clip", "footage"],
    &["film", "movie", "cinema"],
    &["song", "music", "track", "tune"],
    &["audio", "sound"],
    &["news", "headline", "article"],
    &["file", "document", "doc"],
    &["folder", "directory", "dir"],
    &["repo", "repository"],
    &["database", "db"],
    &["issue", "bug", "defect", "ticket"],
    &["error", "failure", "fault", "problem"],
    &["url", "link", "hyperlink"],
    &["website", "site", "webpage", "web", "page"],
    &["user", "account", "profile", "member"],
    &["customer", "client"],
    &["employee", "staff", "worker", "personnel"],
    &["company", "business", "firm", "enterprise"],
    &["job", "career", "vacancy", "employment"],
    &["salary", "wage", "pay", "income"],
    &["car", "vehicle", "automobile", "auto"],
    &["flight", "airline", "plane"],
    &["hotel", "lodging", "accommodation"],
    &["restaurant", "dining", "eatery"],
    &["recipe", "dish", "cook", "cooking"],
    &["doctor", "physician"],
    &["medicine", "drug", "medication"],
    &["illness", "disease", "sickness", "condition"],
    &["child", "kid", "children", "kids"],
    &["shop", "store"],
    &["size", "dimension", "dimensions"],
    &["speed", "velocity"],
    &["word", "term"],
    &["definition", "define", "meaning", "dictionary"],
    &["joke", "humor", "humour", "funny"],
    &["password", "passcode", "credential"],
    &["light", "lamp"],
    &["trend", "trending", "popular", "hot"],
];

/// Synonym groups in analysed form: group -> member -> terms (most members are one term).
#[derive(Debug, Default)]
pub(crate) struct SynonymTable {
    groups: Vec<Vec<Vec<String>>>,
    /// First term of each member -> (group, member) pairs holding it.
    by_first: HashMap<String, Vec<(u32, u32)>>,
}

impl SynonymTable {
    pub(crate) fn build<S: AsRef<str>>(analyzer: &Analyzer, groups: &[Vec<S>]) -> Self {
        let mut table = SynonymTable::default();
        for group in groups {
            let mut members: Vec<Vec<String>> = group
                .iter()
                .map(|m| analyzer.terms(m.as_ref()))
                .filter(|t| !t.is_empty())
                .collect();
            members.sort();
            members.dedup();
            if members.len() < 2 {
                continue;
            }
            let g = table.groups.len() as u32;
            for (m, terms) in members.iter().enumerate() {
                table
                    .by_first
                    .entry(terms[0].clone())
                    .or_default()
                    .push((g, m as u32));
            }
            table.groups.push(members);
        }
        table
    }

    pub(crate) fn built_in(analyzer: &Analyzer) -> Self {
        let groups: Vec<Vec<&str>> = BUILT_IN.iter().map(|g| g.to_vec()).collect();
        Self::build(analyzer, &groups)
    }

    /// For query `terms` (analysed, in order), pushes `(position, alternative term)` for every
    /// synonym of a member present in the query. A multi-term member is present when its terms
    /// follow one another in the query; its own alternatives attach to its first position.
    pub(crate) fn expand(&self, terms: &[String], out: &mut Vec<(usize, String)>) {
        for (pos, term) in terms.iter().enumerate() {
            let Some(entries) = self.by_first.get(term) else {
                continue;
            };
            for &(g, m) in entries {
                let group = &self.groups[g as usize];
                let member = &group[m as usize];
                if terms.len() < pos + member.len() || terms[pos..pos + member.len()] != member[..]
                {
                    continue;
                }
                for (other_idx, other) in group.iter().enumerate() {
                    if other_idx != m as usize {
                        out.extend(other.iter().map(|t| (pos, t.clone())));
                    }
                }
            }
        }
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        let strings = |v: &Vec<String>| {
            v.capacity() * std::mem::size_of::<String>()
                + v.iter().map(String::capacity).sum::<usize>()
        };
        let groups: usize = self
            .groups
            .iter()
            .map(|g| {
                g.capacity() * std::mem::size_of::<Vec<String>>()
                    + g.iter().map(strings).sum::<usize>()
            })
            .sum();
        let index: usize = self
            .by_first
            .iter()
            .map(|(k, v)| k.capacity() + v.capacity() * 8)
            .sum::<usize>()
            + self.by_first.capacity() * (std::mem::size_of::<(String, Vec<(u32, u32)>)>() + 1);
        groups + index
    }
}

/// Built-in defaults plus the operator's groups.
#[derive(Debug)]
pub(crate) struct Synonyms {
    built_in: SynonymTable,
    operator: SynonymTable,
}

impl Synonyms {
    pub(crate) fn new(analyzer: &Analyzer) -> Self {
        Self {
            built_in: SynonymTable::built_in(analyzer),
            operator: SynonymTable::default(),
        }
    }

    pub(crate) fn set_operator(&mut self, analyzer: &Analyzer, groups: &[Vec<String>]) {
        self.operator = SynonymTable::build(analyzer, groups);
    }

    pub(crate) fn expand(&self, terms: &[String]) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        self.built_in.expand(terms, &mut out);
        self.operator.expand(terms, &mut out);
        out
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.built_in.memory_bytes() + self.operator.memory_bytes()
    }
}
