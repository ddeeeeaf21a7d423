//! `oncehook order refund ORDER [--amount N] --reason TEXT`: the same request the order page
//! and the API make, stored for the running server's relay to send; and
//! `oncehook order cancel-refund ORDER COMMAND_ID`, its withdrawal before any send.

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
        let view = crate::http::admin::commands::view(row, None);
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

pub async fn cancel(
    db: &Db,
    order_id: &str,
    command_id: i64,
    actor: &str,
    json: bool,
) -> anyhow::Result<()> {
    let Some(current) = commands::get(db, command_id)
        .await?
        .filter(|c| c.order_id == order_id)
    else {
        anyhow::bail!("order {order_id} has no refund command #{command_id}");
    };
    let actor = Actor {
        name: actor,
        reason: None,
        source: None,
    };
    if !commands::cancel(db, command_id, &actor, now_ms()).await? {
        anyhow::bail!(
            "refused: refund command #{command_id} is {} and can no longer be cancelled (only a request the relay has not started sending can be)",
            current.state
        );
    }
    let row = commands::get(db, command_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("refund command #{command_id} vanished"))?;
    if json {
        let view = crate::http::admin::commands::view(row, None);
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        println!(
            "refund command #{} of {} for order {}: {}; nothing is sent",
            row.id,
            app::format::money(row.amount, Some(&row.currency)),
            row.order_id,
            row.state
        );
    }
    Ok(())
}
