"""Hook specifications of the kvgate host.

Every concrete feature -- each protocol adapter, tool dialect, chat format, model runtime, cache
tier, lookup observer, grammar backend, schema preparer, mask refiner, request check, generation
guard, drafter, tenant policy, request observer, ASGI wrapper and CLI command -- is contributed
through one of these hooks, by the built-in plugins exactly as by third-party ones.
Registry hooks receive a ``register`` callback; registering a name twice is an error (see
:mod:`kvgate.core.plugins`).
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("kvgate")
hookimpl = pluggy.HookimplMarker("kvgate")


@hookspec
def register_adapters(register):
    """Called once when the app is built, to collect wire-protocol adapters.

    Call ``register(name, build_routes)``: ``build_routes(ctx)`` receives the
    :class:`kvgate.core.server.ServerContext` and returns a list of Litestar route handlers.
    Returns nothing.
    """


@hookspec
def register_services(register):
    """Called once when the app is built, to collect services that run beside the HTTP server
    (e.g. the gRPC worker's listener).

    Call ``register(name, build_service)``: ``build_service(ctx)`` receives the
    :class:`kvgate.core.server.ServerContext` and returns None (nothing to run under this config)
    or an object with ``async start()`` -- awaited on the server's event loop after the engine
    started -- and ``async stop()``, awaited at shutdown before the engine stops; ``stop`` must
    return within a few seconds. Returns nothing.
    """


@hookspec
def register_tenant_policies(register):
    """Called once when the app is built, before the model loads, to collect tenant policies: who
    a presented API key is.

    Call ``register(name, build_policy)``: ``build_policy(config)`` receives the
    :class:`kvgate.core.config.Config` and returns None (not configured: this policy is inactive)
    or an object implementing :class:`kvgate.core.tenant_policy.TenantPolicy`; it raises
    :class:`kvgate.core.errors.ConfigError` for a bad configuration. At most one policy may be
    active (two are a ConfigError naming both); with none, authentication is off, and
    ``[server] api_key`` or ``[[server.keys]]`` being set is a ConfigError. Returns nothing.
    """


@hookspec
def register_dialects(register):
    """Called when the registry is built, to collect tool-call dialects.

    Call ``register(name, dialect_factory)``: ``dialect_factory(**options)`` (``variant=`` from
    ``[model] dialect_variant``) returns an object implementing :class:`kvgate.core.dialect.Dialect`.
    The factory is usually the Dialect subclass, whose ``serves`` and ``variant_for`` say which
    models it serves (see :mod:`kvgate.core.loading.dialect_choice`). Returns nothing.
    """


@hookspec
def register_chat_formats(register):
    """Called when the registry is built, to collect whole-prompt encoders.

    A chat format turns canonical messages and tools into prompt text for models that ship no Jinja
    template (e.g. DeepSeek DSML). Call ``register(name, format_factory)``: ``format_factory(runtime,
    dialect)`` returns an object implementing :class:`kvgate.core.chat_format.ChatFormat`.
    Returns nothing.
    """


@hookspec
def register_model_runtimes(register):
    """Called when a model is loaded and by ``kvgate plugins``, to collect model runtimes by name.

    Call ``register(name, spec)`` with a :class:`kvgate.core.loading.model_runtimes.RuntimeSpec` that
    declares the architectures the runtime loads (Hugging Face ``model_type`` and ``architectures``,
    GGUF ``general.architecture``) and its ``load(source, model_config, engine_config, cache_dir)``,
    which receives a :class:`kvgate.core.runtime.ModelSource`, the ``[model]`` and ``[engine]``
    config sections and a folder for converted weights, and returns a
    :class:`kvgate.core.runtime.ModelRuntime`. The host loads a model with the one runtime that
    declares its architecture; an architecture declared by two runtimes is an error. Returns nothing.
    """


@hookspec
def register_model_formats(register):
    """Called when a model is loaded, to collect the readers of model paths by format.

    Call ``register(kind, read)``: ``read(path)`` returns a :class:`kvgate.core.runtime.ModelSource`
    whose ``kind`` is this name and whose architecture names come from the model's config or file
    header (no weights are read), or None when ``path`` is not in this format; it raises
    ``ValueError`` for a path in its format that it cannot read. Exactly one format must claim a
    path. Returns nothing.
    """


@hookspec
def register_default_models(register):
    """Called when a model is loaded with ``model.path`` empty, to find the model served by default.

    Call ``register(name, locate)``: ``locate()`` returns the path of the default model (the
    embedded one), or raises an error saying how to install it. Exactly one default model may be
    registered (disable the others by plugin name). Returns nothing.
    """


@hookspec
def register_cache_tiers(register):
    """Called when the cache manager is built, to collect prefix-cache tiers by role.

    Call ``register(name, spec)`` with a :class:`kvgate.core.cache.tiers.TierSpec`:
    ``TierSpec(role="resident" | "backup", build=build_tier, enabled=..., order=...)``.
    ``build_tier(config, runtime)`` returns an object implementing
    :class:`kvgate.core.cache.tiers.ResidentTier` or :class:`kvgate.core.cache.tiers.BackupTier`
    (it may raise :class:`kvgate.core.cache.tiers.TierUnavailable` to be skipped; any other
    exception also skips the tier, with a warning and its traceback). At most one
    resident tier may be enabled; backups are consulted in ``(order, name)`` order. ``name`` labels
    the tier in metrics and diagnostics. Returns nothing.
    """


@hookspec
def register_lookup_observers(register):
    """Called when the cache manager is built, to collect observers of its lookups (e.g. almost-hits).

    Call ``register(name, build)``: ``build(config, runtime, metrics_registry)`` (a
    :data:`kvgate.core.cache.lookup_observers.LookupObserverBuild`) receives the
    :class:`kvgate.core.config.Config`, the :class:`kvgate.core.runtime.ModelRuntime` and the
    prometheus registry of the cache metrics, and returns an object implementing
    :class:`kvgate.core.cache.lookup_observers.LookupObserver`: after each lookup it is told the
    prompt and the nearest stored sequence of each tier consulted, and its ``diagnostics()`` keys
    join the cache's diagnostics. Returns nothing.
    """


@hookspec
def register_tokenizer_caches(register):
    """Called once when the app is built, to collect the cache in front of the tokenizer.

    Call ``register(name, build_cache)``: ``build_cache(setup)`` receives a
    :class:`kvgate.core.tokenizer_cache.TokenizerCacheSetup` (the tokenizer service's private
    tokenizer, its uncached ``encode``, the bound config -- read your section with
    ``setup.config.section(name)`` -- and the metrics registry) and returns an object implementing
    :class:`kvgate.core.tokenizer_cache.TokenizerCache`, which must give exactly the ids the
    uncached ``encode`` gives. It is called again whenever the service reloads a tokenizer with
    another fingerprint. At most one tokenizer cache may be registered (two are an error); with
    none, every text is tokenized uncached. Returns nothing.
    """


@hookspec
def register_grammar_backends(register):
    """Called when fences are first built, to collect grammar engines.

    Call ``register(name, build_backend)``: ``build_backend(tokenizer_info)`` returns an object that
    compiles grammars into per-request matchers (see :mod:`kvgate.core.fence`). Returns nothing.
    """


@hookspec
def register_schema_preparers(register):
    """Called when fences are first built, to collect what makes a client's JSON Schemas servable
    by the grammar backend before a request's fence compiles.

    Call ``register(name, build)``: ``build(backend, fence_config)`` (a
    :data:`kvgate.core.fence.schema_preparer.SchemaPreparerBuild`) receives the
    :class:`kvgate.core.fence.backend.GrammarBackend` in use and the
    :class:`kvgate.core.config.FenceConfig`, and returns an object implementing
    :class:`kvgate.core.fence.schema_preparer.SchemaPreparer`; it is built once per tokenizer,
    backend and ``[fence]`` settings, and called from several fence workers at once. With several
    registered, ``[fence] schema_preparer`` names the one used (an unknown name is a ConfigError);
    with none, schemas reach the backend as the client sent them. Returns nothing.
    """


@hookspec
def register_mask_refiners(register):
    """Called when fences are first built for a tokenizer, to collect refiners of a fenced
    position's allowed set (e.g. keeping forced text to the tokenizer's own split).

    Call ``register(name, build)``: ``build(tokenizer_info)`` (a
    :data:`kvgate.core.fence.refiners.MaskRefinerBuild`) receives the
    :class:`kvgate.core.fence.tokens.TokenizerInfo` and returns an object implementing
    :class:`kvgate.core.fence.refiners.MaskRefiner`, built once per tokenizer and shared by every
    request's fence. At each position of a grammar-fenced request, refiners run in name order and
    may only remove allowed tokens. Returns nothing.
    """


@hookspec
def register_tool_grammars(register):
    """Called when a request with custom (freeform) tools is fenced, to collect the grammar
    syntaxes their ``format`` may use besides "regex" and "text" (e.g. "lark").

    Call ``register(syntax, grammar_syntax)``: an object implementing
    :class:`kvgate.core.fence.custom.ToolGrammarSyntax`, whose ``to_regex(definition)`` gives the
    regex the fence enforces on the tool's input. A syntax no plugin registers is a 400.
    Returns nothing.
    """


@hookspec
def register_generation_guards(register):
    """Called when a request's fence is composed, to collect generation guards.

    Call ``register(name, build_guard)``: ``build_guard(setup)`` receives a
    :class:`kvgate.core.fence.guards.GuardSetup` (a guard reads its own config section with
    ``setup.config.section(name)``) and returns a fresh per-request guard state machine, or None
    when it has nothing to watch.
    Returns nothing.
    """


@hookspec
def register_drafters(register):
    """Called when the engine is built, to collect speculative-decoding drafters.

    Call ``register(name, build)``: ``build(runtime, engine_config)`` (a
    :data:`kvgate.core.drafter.DrafterBuild`) receives the loaded
    :class:`kvgate.core.runtime.ModelRuntime` (None when no model is loaded) and the
    :class:`kvgate.core.config.EngineConfig`, and returns an object implementing
    :class:`kvgate.core.drafter.Drafter` when the config asks for this drafter (``[engine]
    speculative = name``, or keys of its own with ``speculative`` empty), else None; it raises
    ValueError when asked for a model it cannot draft for. The engine verifies every draft with the
    main model, so a drafter changes speed, never output. Returns nothing.
    """


@hookspec
def register_request_checks(register):
    """Called once when the app is built, to collect what every request must satisfy before its
    prompt is rendered (e.g. tool names the model can carry).

    Call ``register(name, build)``: ``build(dialect, tokenizer)`` (a
    :data:`kvgate.core.pipeline.request_checks.RequestCheckBuild`) receives the served model's
    :class:`kvgate.core.dialect.Dialect` and ``tokenizers.Tokenizer`` and returns an object
    implementing :class:`kvgate.core.pipeline.request_checks.RequestCheck`, whose
    ``check_request(request)`` raises :class:`kvgate.core.errors.InvalidRequest` for a request it
    refuses (the client's 400). Checks run in name order. Returns nothing.
    """


@hookspec
def register_commands(cli):
    """Called when the ``kvgate`` command line is built.

    ``cli`` is the root :class:`click.Group`; add sub-commands to it. Returns nothing.
    """


@hookspec
def register_config_sections(register):
    """Called when a configuration is bound to the plugin manager -- by ``load_config``, by
    ``kvgate serve`` and ``create_app`` before anything is served -- to collect the TOML sections
    plugins own.

    Call ``register(section_name, attrs_class)``: the file's ``[section_name]`` table is structured
    into ``attrs_class`` (its defaults when absent) with the same key-naming errors as the core
    sections (validators from :mod:`kvgate.core.config_fields`); read it back with
    ``config.section(section_name)``. A name used by a core section or by another plugin is an
    error. Returns nothing.
    """


@hookspec
def register_request_observers(register):
    """Called once when the app is built, to collect observers of finished requests (e.g. tracing).

    Call ``register(name, build_observer)``: ``build_observer(ctx)`` receives the
    :class:`kvgate.core.server.ServerContext` (read your config section with
    ``ctx.config.section(name)``) and returns None (nothing to observe under this config) or an
    object implementing :class:`kvgate.core.request_trace.RequestObserver`, whose
    ``request_finished(trace)`` the pipeline calls on the event loop when each generating request
    ends, with a :class:`kvgate.core.request_trace.RequestTrace` of its stages (tokenize, fence
    build, cache lookup, restore, prefill, decode), cache outcome, namespace, prompt and output
    token ids, time to first token and decode rate; warm-ups too (``finish_reason`` ``"warm"``).
    With no observer built, no request records a trace. Returns nothing.
    """


@hookspec
def register_asgi_wrappers(register):
    """Called once when the app is built, to collect wrappers of the HTTP app (e.g. a request log).

    Call ``register(name, build)``: ``build(ctx)`` (a :data:`kvgate.core.asgi_wrapper.AsgiWrapperBuild`)
    receives the :class:`kvgate.core.server.ServerContext` and returns None (nothing to wrap under
    this config) or an object implementing :class:`kvgate.core.asgi_wrapper.AsgiWrapper`: called
    with an ASGI app, it returns the ASGI app served in its place, which sees every HTTP request
    and WebSocket that reaches a route and what is sent back. Wrappers apply in the order of their
    names, the first outermost. Returns nothing.
    """
