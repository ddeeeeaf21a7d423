//! The reference path: a group of events sharing one transaction with a savepoint per
//! event (`effects::apply`), used with `processor.set_based = false`, for a set-based
//! batch that fell back (one failing event then fails only itself) and for claims released
//! at shutdown; and the classified failure of one event (retry or dead letter).

use super::*;

impl Processor {
    /// A group of more than one event shares one transaction (one commit, one fsync), each
    /// event in its own savepoint; what must only follow a commit (alerts, waking the
    /// relay) waits for it.
    pub(super) async fn handle_group(
        &self,
        group: &[Claimed],
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        let mut conn = self.db.writer().acquire().await?;
        let mut after = AfterCommit::default();
        if let [claim] = group {
            self.handle_one(&mut conn, claim, shutdown, &mut after)
                .await;
        } else {
            let mut tx = conn.begin().await?;
            for claim in group {
                self.handle_one(&mut tx, claim, shutdown, &mut after).await;
            }
            crate::store::commit_checked(tx).await?;
        }
        self.after_commit(after);
        Ok(())
    }

    async fn handle_one(
        &self,
        conn: &mut AnyConnection,
        claim: &Claimed,
        shutdown: &CancellationToken,
        after: &mut AfterCommit,
    ) {
        if shutdown.is_cancelled() {
            // Hand it back at once rather than leaving it to lease expiry.
            if let Err(error) =
                inbox::retry_later(conn, claim, now_ms(), "released at shutdown", None).await
            {
                warn!(
                    error = format!("{error:#}"),
                    "could not release a claim at shutdown"
                );
            }
            return;
        }
        let span = tracing::info_span!(
            "event",
            correlation_id = %claim.correlation_id,
            provider = %claim.provider,
            event_id = %claim.event_id,
            attempt = claim.attempt,
        );
        let handled = self.handle(conn, claim, after).instrument(span).await;
        note_handled(after, claim, &handled);
    }

    /// Processes until nothing is due (rows waiting for a retry later are not due).
    pub async fn run_until_idle(&self) -> anyhow::Result<usize> {
        let never = CancellationToken::new();
        let mut total = 0;
        loop {
            // While other callers of this processor are on a backlog, wait for a turn
            // rather than stop early: this returns only when a claim found nothing due.
            let Some(round) = self.start_round() else {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            };
            match self.run_round(round.limit, &never).await? {
                0 => return Ok(total),
                n => total += n,
            }
        }
    }

    async fn handle(
        &self,
        conn: &mut AnyConnection,
        claim: &Claimed,
        after: &mut AfterCommit,
    ) -> Handled {
        let (failure, order_id) = match self.try_handle(conn, claim, after).await {
            Ok(Ok(handled)) => return handled,
            Ok(Err((failure, order_id))) => (failure, order_id),
            Err(error) => (
                Failure::new(
                    classify_db_error(&error),
                    format!("processing failed: {error:#}"),
                ),
                None,
            ),
        };
        match self
            .fail(conn, claim, &failure, order_id.as_deref(), after)
            .await
        {
            Ok(handled) => handled,
            Err(error) => {
                // Even this failed: the lease runs out and the row is claimed again.
                warn!(
                    error = format!("{error:#}"),
                    "could not file the failure; lease will expire"
                );
                Handled::Fenced
            }
        }
    }

    /// Retry within the policy, or dead-letter (at once for permanent and business).
    pub(super) async fn fail(
        &self,
        conn: &mut AnyConnection,
        claim: &Claimed,
        failure: &Failure,
        order_id: Option<&str>,
        after: &mut AfterCommit,
    ) -> anyhow::Result<Handled> {
        if failure.class.retries() {
            if let Next::RetryInMs(delay) = self
                .settings
                .retry
                .next(claim.budget_attempt(), failure.retry_after)
            {
                warn!(class = failure.class.as_str(), error = %failure.message, delay_ms = delay, "will retry");
                inbox::retry_later(
                    conn,
                    claim,
                    now_ms() + delay,
                    &failure.message,
                    Some(failure.class),
                )
                .await?;
                return Ok(Handled::RetryLater(failure.message.clone()));
            }
        }
        let failure = if failure.class.retries() {
            Failure::new(
                failure.class,
                format!(
                    "gave up after {} attempts: {}",
                    claim.budget_attempt(),
                    failure.message
                ),
            )
        } else {
            failure.clone()
        };
        let resolve_by = now_ms() + self.resolve_within_ms;
        match inbox::dead_letter(conn, claim, &failure, order_id, resolve_by).await? {
            Some(id) => {
                after.dead_letters.push(DeadLetterAlert {
                    dead_letter_id: id,
                    stage: "processor".into(),
                    class: failure.class.as_str().into(),
                    error: failure.message.clone(),
                    event_id: Some(claim.event_id.clone()),
                    order_id: order_id.map(str::to_owned),
                });
                Ok(Handled::Filed(Filed::Dead))
            }
            None => Ok(Handled::Fenced),
        }
    }

    /// `Ok(Ok(_))`: handled; `Ok(Err(_))`: a classified failure; `Err(_)`: the database.
    async fn try_handle(
        &self,
        conn: &mut AnyConnection,
        claim: &Claimed,
        after: &mut AfterCommit,
    ) -> anyhow::Result<Result<Handled, (Failure, Option<String>)>> {
        let now = now_ms();
        let permanent = |m: String| Ok(Err((Failure::new(ErrorClass::Permanent, m), None)));
        let Some(provider) = self.providers.get(&claim.provider) else {
            return permanent(format!("provider {} is not configured", claim.provider));
        };
        let event = match provider.mapping.map(&claim.raw_body) {
            Ok(event) => event,
            Err(e) if e.is_ignorable() => {
                info!(reason = %e, "ignored");
                let ok = inbox::file(
                    &mut *conn,
                    claim,
                    Filed::Ignored,
                    Some(&e.to_string()),
                    None,
                    None,
                    now,
                )
                .await?;
                return Ok(Ok(if ok {
                    Handled::Filed(Filed::Ignored)
                } else {
                    Handled::Fenced
                }));
            }
            Err(e) => return permanent(e.to_string()),
        };
        note_delay(after, claim, &event);
        let order_id = match &event.order_id {
            Some(order_id) => order_id.clone(),
            None => {
                match effects::resolve_order(conn, &claim.provider, &event.lookup_refs).await? {
                    Some(order_id) => order_id,
                    None => {
                        let reason = format!(
                            "order not known yet: no earlier event named an order for {}",
                            event.lookup_refs.join(", ")
                        );
                        return Ok(Err((Failure::new(ErrorClass::Unknown, reason), None)));
                    }
                }
            }
        };
        let outcome = effects::apply(
            conn,
            EffectRequest {
                claim,
                event: &event,
                order_id: &order_id,
                outbox: &self.outbox,
                now,
            },
        )
        .await?;
        if let EffectOutcome::Applied { moved, .. }
        | EffectOutcome::Stale { moved, .. }
        | EffectOutcome::Refused { moved, .. } = &outcome
        {
            after.moved.push((claim.provider.clone(), moved.clone()));
        }
        let business = |reason: &str| {
            Ok(Err((
                Failure::new(ErrorClass::Business, reason),
                Some(order_id.clone()),
            )))
        };
        let handled = match &outcome {
            EffectOutcome::Applied { status, .. } => {
                info!(
                    order_id,
                    transition = event.transition.as_str(),
                    status = status.as_str(),
                    "applied"
                );
                Handled::Filed(Filed::Applied)
            }
            EffectOutcome::Duplicate { reason, .. } => {
                info!(order_id, %reason, "duplicate effect");
                Handled::Filed(Filed::Duplicate)
            }
            EffectOutcome::Stale { reason, .. } => {
                info!(order_id, %reason, "stale");
                Handled::Filed(Filed::Stale)
            }
            EffectOutcome::Refused { reason, .. } => {
                info!(order_id, %reason, "refused regression, recorded");
                Handled::Filed(Filed::Refused)
            }
            EffectOutcome::Mismatch { reason, .. } => return business(reason),
            EffectOutcome::Fenced => Handled::Fenced,
        };
        Ok(Ok(handled))
    }
}
