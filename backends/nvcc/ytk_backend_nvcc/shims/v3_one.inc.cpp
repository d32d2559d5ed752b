// ytk TensorRT plugin shim, engine API trt10-IPluginV3: IPluginV3 (OneCore, OneBuild, OneRuntime) +
// IPluginCreatorV3One.
//
// Template read by ytk_backend_nvcc/trt_shim.py and appended after common.inc.cpp.

#if NV_TENSORRT_MAJOR < 10
#error "ytk shim: IPluginV3 needs TensorRT 10 or newer"
#endif

namespace
{
namespace ytk
{
class PluginV3 final : public nvinfer1::IPluginV3,
                       public nvinfer1::IPluginV3OneCore,
                       public nvinfer1::IPluginV3OneBuild,
                       public nvinfer1::IPluginV3OneRuntime
{
public:
    PluginV3(Fields fields, char const* pluginNamespace)
        : mFields(std::move(fields))
        , mNamespace(pluginNamespace)
    {
        mFields.stampFingerprint();
    }

    // -- IPluginV3 --------------------------------------------------------------------------------------------
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override
    {
        switch (type)
        {
        case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
        case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
        case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
        }
        return nullptr;
    }
    nvinfer1::IPluginV3* clone() noexcept override
    {
        try
        {
            return new PluginV3(*this);
        }
        catch (...)
        {
            logError("clone: out of memory");
            return nullptr;
        }
    }

    // -- IPluginV3OneCore -------------------------------------------------------------------------------------
    char const* getPluginName() const noexcept override
    {
        return kName;
    }
    char const* getPluginVersion() const noexcept override
    {
        return kVersion;
    }
    char const* getPluginNamespace() const noexcept override
    {
        return mNamespace;
    }

    // -- IPluginV3OneBuild ------------------------------------------------------------------------------------
    int32_t getNbOutputs() const noexcept override
    {
        return kNbOutputs;
    }
    int32_t getOutputDataTypes(DataType* outputTypes, int32_t nbOutputs, DataType const* /*inputTypes*/,
        int32_t nbInputs) const noexcept override
    {
        if (outputTypes == nullptr || nbOutputs != kNbOutputs || nbInputs != kNbInputs)
        {
            logError("getOutputDataTypes: the layer does not have the inputs and outputs the contract declares");
            return -1;
        }
        for (int32_t i = 0; i < kNbOutputs; ++i)
        {
            outputTypes[i] = kTypes[kNbInputs + i];
        }
        return 0;
    }
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
        nvinfer1::DimsExprs const* /*shapeInputs*/, int32_t /*nbShapeInputs*/, nvinfer1::DimsExprs* outputs,
        int32_t nbOutputs, nvinfer1::IExprBuilder& exprBuilder) noexcept override
    {
        if (outputs == nullptr || nbOutputs != kNbOutputs || !outputShapes(inputs, nbInputs, outputs, exprBuilder))
        {
            logError("getOutputShapes: the inputs do not have the ranks the contract declares");
            return -1;
        }
        return 0;
    }
    bool supportsFormatCombination(
        int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept override
    {
        return inOut != nullptr && supports(pos, inOut[pos].desc.type, inOut[pos].desc.format, nbInputs, nbOutputs);
    }
    int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept override
    {
        try
        {
            std::string why;
            Dims dims[kNbInputs];
            for (int32_t i = 0; i < kNbInputs && i < nbInputs; ++i)
            {
                dims[i] = in[i].desc.dims;
            }
            if (nbOutputs != kNbOutputs || !ranksMatch(dims, nbInputs, why))
            {
                logError("configurePlugin: " + (why.empty() ? std::string("wrong number of outputs") : why));
                return -1;
            }
            return 0;
        }
        catch (...)
        {
            return -1;
        }
    }
    size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept override
    {
        // Enough for the largest shapes of the optimisation profile.
        Dims dims[kNbInputs];
        for (int32_t i = 0; i < kNbInputs && i < nbInputs; ++i)
        {
            dims[i] = inputs[i].max;
        }
        return workspaceFor(dims, nbInputs);
    }

    // -- IPluginV3OneRuntime ----------------------------------------------------------------------------------
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs) noexcept override
    {
        try
        {
            if (nbInputs != kNbInputs || nbOutputs != kNbOutputs)
            {
                logError("onShapeChange: the layer does not have the inputs and outputs the contract declares");
                return -1;
            }
            Dims inDims[kNbInputs];
            Dims outDims[kNbOutputs];
            for (int32_t i = 0; i < kNbInputs; ++i)
            {
                inDims[i] = in[i].dims;
            }
            for (int32_t i = 0; i < kNbOutputs; ++i)
            {
                outDims[i] = out[i].dims;
            }
            std::string why;
            int64_t e[kNbExtents + 1] = {};
            if (!ranksMatch(inDims, nbInputs, why) || !computeExtents(inDims, e) || !shapesMatch(inDims, outDims, e, why))
            {
                logError("onShapeChange: " + (why.empty() ? std::string("cannot evaluate the extents") : why));
                return -1;
            }
            return 0;
        }
        catch (...)
        {
            return -1;
        }
    }
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override
    {
        return run(inputDesc, outputDesc, inputs, outputs, workspace, stream);
    }
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* /*context*/) noexcept override
    {
        return clone();
    }
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override
    {
        try
        {
            return mFields.collection();
        }
        catch (...)
        {
            return nullptr;
        }
    }

private:
    Fields mFields;
    char const* mNamespace;
};

class CreatorV3 final : public nvinfer1::IPluginCreatorV3One
{
public:
    explicit CreatorV3(char const* pluginNamespace)
        : mNamespace(pluginNamespace)
    {
    }

    char const* getPluginName() const noexcept override
    {
        return kName;
    }
    char const* getPluginVersion() const noexcept override
    {
        return kVersion;
    }
    char const* getPluginNamespace() const noexcept override
    {
        return mNamespace;
    }
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override
    {
        return &mNoFields; // the contract declares no attributes; any given are kept all the same
    }
    // At build time `fc` holds the node's attributes; at run time what getFieldsToSerialize wrote.
    nvinfer1::IPluginV3* createPlugin(
        char const* /*name*/, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept override
    {
        try
        {
            Fields fields;
            std::string why;
            if (!fields.assign(fc, why) || !fields.fingerprintMatches(why))
            {
                logError(std::string(phase == nvinfer1::TensorRTPhase::kRUNTIME ? "deserialising" : "createPlugin")
                    + ": " + why);
                return nullptr;
            }
            return new PluginV3(std::move(fields), mNamespace);
        }
        catch (...)
        {
            logError("createPlugin: out of memory");
            return nullptr;
        }
    }

private:
    char const* mNamespace;
    nvinfer1::PluginFieldCollection mNoFields{};
};

CreatorV3 gCreatorInNamespace(kNamespace);
CreatorV3 gCreatorInEmptyNamespace("");
nvinfer1::IPluginCreatorInterface* gCreators[] = {&gCreatorInNamespace, &gCreatorInEmptyNamespace};
} // namespace ytk
} // namespace

// TensorRT 10+ dynamic plugin library entry point: the creators to register (the selector's namespace and, when
// that is not already empty, the empty namespace).
extern "C" __attribute__((visibility("default"))) nvinfer1::IPluginCreatorInterface* const* getCreators(
    int32_t& nbCreators)
{
    nbCreators = ytk::kNamespace[0] != '\0' ? 2 : 1;
    return ytk::gCreators;
}

#pragma GCC diagnostic pop
