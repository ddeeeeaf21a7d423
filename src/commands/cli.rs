//! `oncehook order refund ORDER [--amount N] --reason TEXT`: the same request the order page
//! and the API make, stored for the running server's relay to send.

use crate::store::commands::{self, NewRefund};
use crate::store::dead_letters::Actor;
use crate::store::{now_ms, Db};

pub async fn refund(
    db: &Db,
    order_id: &str,
    amount: Option<i64>,
    reason: &str,
    actor: &str,
    json: bool,
) -> anyhow::Result<()> {
    let actor = Actor {
        name: actor,
        reason: None,
        source: None,
    };
    let stored = commands::request_refund(
        db,
        &NewRefund {
            order_id,
            amount,
            reason,
            actor: &actor,
            now: now_ms(),
        },
    )
    .await?;
    let row = match stored {
        Ok(row) => row,
        // Refused: nothing stored, nothing sent; the exit status says so.
        Err(refusal) => anyhow::bail!("refused: {refusal}"),
    };
    if json {
        let view = crate::admin::commands::view(row, None);
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        println!(
            "refund command #{} of {} for order {}: {} (idempotency key {}); the relay sends it",
            row.id,
            app::format::money(row.amount, Some(&row.currency)),
            row.order_id,
            row.state,
            row.idempotency_key
        );
    }
    Ok(())
}
