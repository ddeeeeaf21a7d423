use crate::components::ErrorPanel;
use crate::error::AppError;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn NotFound() -> impl IntoView {
    let loc = crate::locale::current();
    view! {
        <Title text=crate::i18n::td_string!(loc, error.not_found)/>
        <ErrorPanel error=AppError::NotFound/>
    }
}
