//! Templates on the `files` app alone (an app no training template uses: these are
//! test-challenge templates).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::pick::{params, text};
use super::{SkillParam, Solution, TaskKind, Template};
use crate::world::records::EntryKind;
use crate::world::{Db, Money, USER};

/// The directory receipts are kept in.
const RECEIPTS: &str = "/documents/receipts";

/// The files templates.
pub(super) const TEMPLATES: &[Template] = &[
    Template {
        name: "files_receipts_total",
        apps: &["files"],
        kind: TaskKind::Question,
        pick: |p| {
            let stores: Vec<String> = stores(p.db()).into_iter().collect();
            Some(params([("store", json!(p.pick(&stores)?))]))
        },
        instruction: |p| {
            format!(
                "What is the total of all my {} receipts in {RECEIPTS}? Each receipt file states its total.",
                text(p, "store")
            )
        },
        reference: |r, p| {
            let total: Money = receipts(r.db(), text(p, "store"))
                .iter()
                .filter_map(|(_, content)| receipt_total(content))
                .sum();
            Ok(json!(total.dollars()))
        },
        solution: Solution {
            names: &[
                "total_of_store_receipts",
                "sum_receipts_for_store",
                "receipts_total",
            ],
            summaries: &[
                "Adds up the totals of the user's receipt files from one store.",
                "Reads every receipt of a store in the receipts folder and sums their totals.",
            ],
            params: &[SkillParam {
                name: "store",
                ty: "str",
                doc: "the store's name as it appears in the file names",
            }],
            returns: ("float", "the sum of the receipts' totals in dollars"),
            docs: &[("files", "search_files"), ("files", "show_file")],
            body: include_str!("skills/files_receipts_total.star"),
        },
    },
    Template {
        name: "files_copy_receipts",
        apps: &["files"],
        kind: TaskKind::Action,
        pick: |p| {
            let stores: Vec<String> = stores(p.db()).into_iter().collect();
            let store = p.pick(&stores)?;
            let directory = format!("/documents/{store}_receipts");
            Some(params([
                ("store", json!(store)),
                ("directory", json!(directory)),
            ]))
        },
        instruction: |p| {
            format!(
                "Create the directory {} and copy every {} receipt from {RECEIPTS} into it, keeping the file names.",
                text(p, "directory"),
                text(p, "store")
            )
        },
        reference: |r, p| {
            let directory = text(p, "directory");
            let paths: Vec<String> = receipts(r.db(), text(p, "store"))
                .into_iter()
                .map(|(path, _)| path)
                .collect();
            r.call("files", "create_directory", json!({"path": directory}))?;
            for path in paths {
                let name = path.rsplit('/').next().unwrap_or_default();
                r.call(
                    "files",
                    "copy_file",
                    json!({"source": path, "destination": format!("{directory}/{name}")}),
                )?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &[
                "copy_store_receipts",
                "collect_receipts_of_store",
                "gather_store_receipts",
            ],
            summaries: &[
                "Copies every receipt of one store into a new directory, keeping the names.",
                "Creates a directory and fills it with copies of a store's receipts.",
            ],
            params: &[
                SkillParam {
                    name: "store",
                    ty: "str",
                    doc: "the store's name as it appears in the file names",
                },
                SkillParam {
                    name: "directory",
                    ty: "str",
                    doc: "the new directory's absolute path",
                },
            ],
            returns: ("int", "how many receipts were copied"),
            docs: &[
                ("files", "search_files"),
                ("files", "create_directory"),
                ("files", "copy_file"),
            ],
            body: include_str!("skills/files_copy_receipts.star"),
        },
    },
];

/// The stores the user has receipts from.
fn stores(db: &Db) -> BTreeSet<String> {
    db.files
        .filter(|f| f.owner == USER && f.kind == EntryKind::File && f.parent() == RECEIPTS)
        .filter_map(|(_, f)| {
            let stem = f.name().strip_suffix(".txt")?;
            stem.rsplit('_').next().map(str::to_owned)
        })
        .collect()
}

/// The user's receipts whose name mentions `store`, as `(path, content)`, by path.
fn receipts(db: &Db, store: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = db
        .files
        .filter(|f| {
            f.owner == USER
                && f.kind == EntryKind::File
                && f.parent() == RECEIPTS
                && f.name().contains(store)
        })
        .map(|(_, f)| (f.path.clone(), f.content.clone()))
        .collect();
    found.sort();
    found
}

/// The amount on a receipt's `Total: $x` line.
fn receipt_total(content: &str) -> Option<Money> {
    let amount = content.lines().find_map(|l| l.strip_prefix("Total: $"))?;
    let dollars: f64 = amount.trim().parse().ok()?;
    Some(Money::from_cents((dollars * 100.0).round() as i64))
}
