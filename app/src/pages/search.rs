//! `/search?q=…`: the top bar's search box posts here. A hit redirects to its order (or
//! event) while the server renders, so without JavaScript it is one request; this page is
//! what a person sees only when nothing matched.

use crate::api::search;
use crate::backend::SearchHit;
use crate::components::ErrorPanel;
use crate::i18n::*;
use crate::locale::current;
use leptos::either::EitherOf3;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn SearchPage() -> impl IntoView {
    let query = use_query_map();
    let text = Memo::new(move |_| query.with(|q| q.get("q").unwrap_or_default()));
    let hit = Resource::new(move || text.get(), search);
    let loc = current();
    view! {
        <Title text=td_string!(loc, search.title)/>
        <Transition fallback=move || view! { <p class="loading">{td_string!(loc, search.searching)}</p> }>
            {move || Suspend::new(async move {
                let searched = text.get_untracked();
                match hit.await {
                    Ok(SearchHit::Nothing) => EitherOf3::A(view! {
                        <section class="panel" id="search-nothing">
                            <h1>{td_string!(loc, search.nothing)}</h1>
                            <p>
                                {if searched.trim().is_empty() {
                                    td_string!(loc, search.hint).to_string()
                                } else {
                                    td_string!(loc, search.no_match, text = searched.trim()).to_string()
                                }}
                            </p>
                        </section>
                    }),
                    Ok(found) => EitherOf3::B(view! {
                        <p class="loading">
                            <a id="search-hit" href=found.href().unwrap_or_default()>{td_string!(loc, search.open)}</a>
                        </p>
                    }),
                    Err(error) => EitherOf3::C(view! { <ErrorPanel error/> }),
                }
            })}
        </Transition>
    }
}
