// Everything in ag::nn: modules, layers, attention, rotary positions, the Transformer and the
// summaries.
#pragma once

#include "nn/attention.h"
#include "nn/fused.h"
#include "nn/init.h"
#include "nn/language_model.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/positions.h"
#include "nn/summary.h"
#include "nn/transformer.h"
